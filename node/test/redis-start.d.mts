import type { ChildProcess } from "node:child_process";

export function freePort(): Promise<number>;
export function freeClusterPort(): Promise<number>;
export function info(port: number, timeoutMs?: number): Promise<string | undefined>;
export function ready(port: number, pid: number | undefined): Promise<boolean>;
export class NotStarted extends Error {
  constructor(port: number, log: string);
  readonly log: string;
}
export function spawnReady(
  binary: string,
  args: string[],
  port: number,
  logFile: string,
  options?: { spawned?: (child: ChildProcess) => void; timeoutMs?: number },
): Promise<ChildProcess>;
export function onFreePort<T>(start: (port: number) => Promise<T>, options?: { cluster?: boolean; port?: number }): Promise<T>;
