/* An LD_PRELOAD shim that shifts the wall clock of a process (CLOCK_REALTIME, gettimeofday, time)
 * by an offset in microseconds read, on every call, from the file named by CLOCKSHIFT_FILE: a signed
 * decimal number in the file's first 32 bytes. Tests rewrite the file in place to step the clock of
 * a running redis-server backwards or forwards. The monotonic clock is left alone.
 *
 * libfaketime does the same, but 0.9.10 cannot start a redis-server linked with jemalloc (recursive
 * clock_gettime during initialisation). This shim uses raw system calls and no allocation. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static const volatile char *offset_file;
static int opened;

static long long offset_us(void) {
    if (!opened) {
        opened = 1;
        const char *path = getenv("CLOCKSHIFT_FILE");
        if (path) {
            int fd = open(path, O_RDONLY);
            if (fd >= 0) {
                void *map = mmap(0, 32, PROT_READ, MAP_SHARED, fd, 0);
                if (map != MAP_FAILED) offset_file = map;
                close(fd);
            }
        }
    }
    if (!offset_file) return 0;
    long long value = 0;
    int i = 0, negative = offset_file[0] == '-';
    for (i = negative; i < 32 && offset_file[i] >= '0' && offset_file[i] <= '9'; i++)
        value = value * 10 + (offset_file[i] - '0');
    return negative ? -value : value;
}

static void shift(long long *sec, long long *usec_or_nsec, long long unit_per_sec, long long units_per_us) {
    long long total = *usec_or_nsec + offset_us() * units_per_us;
    *sec += total / unit_per_sec;
    total %= unit_per_sec;
    if (total < 0) {
        total += unit_per_sec;
        *sec -= 1;
    }
    *usec_or_nsec = total;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    int r = syscall(SYS_clock_gettime, id, ts);
    if (r == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) {
        long long sec = ts->tv_sec, nsec = ts->tv_nsec;
        shift(&sec, &nsec, 1000000000LL, 1000LL);
        ts->tv_sec = sec;
        ts->tv_nsec = nsec;
    }
    return r;
}

int gettimeofday(struct timeval *tv, void *tz) {
    int r = syscall(SYS_gettimeofday, tv, tz);
    if (r == 0 && tv) {
        long long sec = tv->tv_sec, usec = tv->tv_usec;
        shift(&sec, &usec, 1000000LL, 1LL);
        tv->tv_sec = sec;
        tv->tv_usec = usec;
    }
    return r;
}

time_t time(time_t *out) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (out) *out = ts.tv_sec;
    return ts.tv_sec;
}
