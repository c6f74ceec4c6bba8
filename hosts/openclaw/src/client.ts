// A client of `lossless serve`: JSON-RPC 2.0 over the stdio of a child process this plugin
// starts, or over HTTP to a server several hosts share (docs/serve.md in the lossless repo).

import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";

/** What the plugin's config (`plugins.entries.lossless.config`) may say. */
export interface LosslessConfig {
  /** The `lossless` command (default: `lossless` on PATH). */
  command?: string;
  /** Arguments before `serve` (e.g. `["--config", "/path/lossless.toml"]`). */
  args?: string[];
  /** The store: a SQLite file or a PostgreSQL URL (default: lossless's own default). */
  db?: string;
  /** A shared `lossless serve --http` server instead of a child process. */
  url?: string;
  /** Its bearer token, or the file that holds it (`--token-file`). */
  token?: string;
  tokenFile?: string;
}

/** A JSON-RPC error from the server, with its code and advice. */
export class ServeError extends Error {
  constructor(
    readonly code: number,
    message: string,
    readonly data?: unknown,
  ) {
    super(message);
    this.name = "ServeError";
  }
}

interface Reply {
  id?: number | string | null;
  result?: unknown;
  error?: { code: number; message: string; data?: unknown };
}

type Waiter = { resolve: (value: unknown) => void; reject: (error: Error) => void };

/** One server connection: `call(method, params)` resolves with the result. */
export interface Client {
  call<T = unknown>(method: string, params: Record<string, unknown>): Promise<T>;
  close(): void;
}

function unwrap(reply: Reply): unknown {
  if (reply.error) {
    throw new ServeError(reply.error.code, reply.error.message, reply.error.data);
  }
  return reply.result;
}

/** `lossless [args] [--db DB] serve --stdio` as a child of this process. The child is not
 * waited for: when the host exits (or `close()` ends its stdin) the server answers what it
 * was sent, finishes background compaction, and exits by itself. */
class StdioClient implements Client {
  private child: ChildProcessWithoutNullStreams;
  private next = 1;
  private waiting = new Map<number, Waiter>();
  private failure: Error | undefined;

  constructor(config: LosslessConfig) {
    const args = [...(config.args ?? [])];
    if (config.db) args.push("--db", config.db);
    args.push("serve", "--stdio");
    this.child = spawn(config.command ?? "lossless", args, { stdio: ["pipe", "pipe", "pipe"] });
    this.child.on("error", (error) => this.fail(new Error(`lossless serve did not start: ${error.message}`)));
    this.child.on("exit", (code) => this.fail(new Error(`lossless serve exited (code ${code})`)));
    this.child.stderr.on("data", (chunk: Buffer) => process.stderr.write(`[lossless] ${chunk}`));
    createInterface({ input: this.child.stdout }).on("line", (line) => this.receive(line));
    // The host must be free to exit while the server finishes its work: the child holds the
    // host's event loop only while an answer is awaited.
    this.hold(false);
  }

  private hold(waiting: boolean): void {
    const toggle = (handle: unknown) => {
      const h = handle as { ref?: () => void; unref?: () => void };
      if (waiting) h.ref?.();
      else h.unref?.();
    };
    toggle(this.child);
    for (const stream of [this.child.stdin, this.child.stdout, this.child.stderr]) toggle(stream);
  }

  private receive(line: string): void {
    let reply: Reply;
    try {
      reply = JSON.parse(line) as Reply;
    } catch {
      return;
    }
    const waiter = typeof reply.id === "number" ? this.waiting.get(reply.id) : undefined;
    if (!waiter || typeof reply.id !== "number") return;
    this.waiting.delete(reply.id);
    if (this.waiting.size === 0) this.hold(false);
    try {
      waiter.resolve(unwrap(reply));
    } catch (error) {
      waiter.reject(error as Error);
    }
  }

  private fail(error: Error): void {
    this.failure = error;
    for (const waiter of this.waiting.values()) waiter.reject(error);
    this.waiting.clear();
    this.hold(false);
  }

  call<T>(method: string, params: Record<string, unknown>): Promise<T> {
    if (this.failure) return Promise.reject(this.failure);
    const id = this.next++;
    return new Promise<T>((resolve, reject) => {
      if (this.waiting.size === 0) this.hold(true);
      this.waiting.set(id, { resolve: resolve as (value: unknown) => void, reject });
      this.child.stdin.write(`${JSON.stringify({ jsonrpc: "2.0", id, method, params })}\n`);
    });
  }

  close(): void {
    if (!this.child.stdin.destroyed) this.child.stdin.end();
  }
}

/** `lossless serve --http` shared by several hosts. */
class HttpClient implements Client {
  private next = 1;
  private token: string;

  constructor(private url: string, config: LosslessConfig) {
    this.token = config.token ?? (config.tokenFile ? readFileSync(config.tokenFile, "utf8").trim() : "");
  }

  async call<T>(method: string, params: Record<string, unknown>): Promise<T> {
    const response = await fetch(this.url, {
      method: "POST",
      headers: { "Content-Type": "application/json", Authorization: `Bearer ${this.token}` },
      body: JSON.stringify({ jsonrpc: "2.0", id: this.next++, method, params }),
    });
    if (!response.ok) {
      throw new ServeError(response.status, `lossless serve answered HTTP ${response.status}: ${await response.text()}`);
    }
    return unwrap((await response.json()) as Reply) as T;
  }

  close(): void {}
}

// OpenClaw evaluates a plugin's module more than once per process (the engine and the tools
// may come from different copies): the connection lives on globalThis, one per process.
const SHARED = Symbol.for("lossless.openclaw.client");
type Holder = { [SHARED]?: Client };

/** The process's connection (started on first use). */
export function client(config: LosslessConfig): Client {
  const holder = globalThis as Holder;
  let made = holder[SHARED];
  if (!made) {
    made = config.url ? new HttpClient(config.url, config) : new StdioClient(config);
    holder[SHARED] = made;
  }
  return made;
}

/** Let the connection go (the next call starts another). */
export function release(): void {
  const holder = globalThis as Holder;
  holder[SHARED]?.close();
  delete holder[SHARED];
}
