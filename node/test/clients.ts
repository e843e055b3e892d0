// The clients the tests run on, each with its DEFAULT options (nothing set for the limiter's sake).
import { Redis, Cluster } from "ioredis";
import { Redis as Redis6, Cluster as Cluster6 } from "ioredis6";
import { createClient, createCluster } from "redis";
import { createClient as createClient4, createCluster as createCluster4 } from "redis4";

export interface Made {
  client: unknown;
  close(): Promise<void>;
}

export type Factory = { name: string; make(port: number): Promise<Made>; cluster(port: number): Promise<Made> };

export const FACTORIES: Factory[] = [
  {
    name: "ioredis 5",
    async make(port) {
      const c = new Redis(port, "127.0.0.1");
      c.on("error", () => {});
      return { client: c, close: async () => void c.disconnect() };
    },
    async cluster(port) {
      const c = new Cluster([{ host: "127.0.0.1", port }]);
      c.on("error", () => {});
      await new Promise((ok) => c.once("ready", ok));
      return { client: c, close: async () => void c.disconnect() };
    },
  },
  {
    name: "ioredis 6",
    async make(port) {
      const c = new Redis6(port, "127.0.0.1");
      c.on("error", () => {});
      return { client: c, close: async () => void c.disconnect() };
    },
    async cluster(port) {
      const c = new Cluster6([{ host: "127.0.0.1", port }]);
      c.on("error", () => {});
      await new Promise((ok) => c.once("ready", ok));
      return { client: c, close: async () => void c.disconnect() };
    },
  },
  {
    name: "node-redis 5",
    async make(port) {
      const c = createClient({ url: `redis://127.0.0.1:${port}` });
      c.on("error", () => {});
      await c.connect();
      return { client: c, close: async () => void c.destroy() };
    },
    async cluster(port) {
      const c = createCluster({ rootNodes: [{ url: `redis://127.0.0.1:${port}` }] });
      c.on("error", () => {});
      await c.connect();
      return { client: c, close: async () => void c.destroy() };
    },
  },
  {
    name: "node-redis 4",
    async make(port) {
      const c = createClient4({ url: `redis://127.0.0.1:${port}` });
      c.on("error", () => {});
      await c.connect();
      return { client: c, close: async () => void (await c.disconnect().catch(() => {})) };
    },
    async cluster(port) {
      const c = createCluster4({ rootNodes: [{ url: `redis://127.0.0.1:${port}` }] });
      c.on("error", () => {});
      await c.connect();
      return { client: c, close: async () => void (await c.disconnect().catch(() => {})) };
    },
  },
];
