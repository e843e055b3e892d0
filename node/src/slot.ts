/** The Redis Cluster hash slot of a key: CRC16 (XMODEM) of its hash tag (the part between the first
 * `{` and the next `}`, when not empty) or of the whole key, modulo 16384. */
const TABLE = new Uint16Array(256);
for (let i = 0; i < 256; i++) {
  let c = i << 8;
  for (let j = 0; j < 8; j++) c = c & 0x8000 ? ((c << 1) ^ 0x1021) & 0xffff : (c << 1) & 0xffff;
  TABLE[i] = c;
}

export function slotOf(key: string | Uint8Array): number {
  let bytes = typeof key === "string" ? Buffer.from(key, "utf8") : key;
  const open = bytes.indexOf(0x7b);
  if (open >= 0) {
    const close = bytes.indexOf(0x7d, open + 1);
    if (close > open + 1) bytes = bytes.subarray(open + 1, close);
  }
  let crc = 0;
  for (const b of bytes) crc = ((crc << 8) & 0xffff) ^ TABLE[((crc >> 8) ^ b) & 0xff]!;
  return crc & 16383;
}
