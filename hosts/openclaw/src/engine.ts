// OpenClaw's ContextEngine over `lossless serve`: every turn stored exactly, the context the
// model sees assembled by lossless (summaries, then the newest turns), compaction lossless's.
//
// The budget is the room OpenClaw's window leaves the messages: the window less OpenClaw's
// own prompt (system prompt, tool schemas), less its reply reserve, less the turn under way.
// lossless measures OpenClaw's part from the provider's usage of each turn's last request and
// keeps it per session (docs/openclaw.md, "What the budget is made of").

import type { AgentMessage, HarnessContextEngine as ContextEngine } from "openclaw/plugin-sdk/agent-harness-runtime";

import { client, release, type LosslessConfig } from "./client.js";

type Method<K extends keyof ContextEngine> = Extract<NonNullable<ContextEngine[K]>, (...args: any[]) => unknown>;
type Params<K extends keyof ContextEngine> = Parameters<Method<K>>[0];
type Result<K extends keyof ContextEngine> = Awaited<ReturnType<Method<K>>>;

export const ENGINE_ID = "lossless";

interface Ingested {
  inserted: number;
  skipped: number;
}

interface Assembled {
  messages: AgentMessage[];
  tokens: number;
}

interface HostCompaction {
  compacted: boolean;
  tokens_before: number;
  tokens_after: number;
  reason: string | null;
}

/** The budget a turn's context is assembled within when the host names none. */
const DEFAULT_BUDGET = 100_000;

/** What the plugin learns of a session within one OpenClaw process (the engine is disposed
 * after every turn, and the module may be evaluated more than once: kept on globalThis). */
interface Turn {
  /** The model's context window (the loop's `promptTokenBudget`, or `modelContextWindow`). */
  window?: number;
  /** OpenClaw's reserve for the reply (the pre-prompt assembly's `maxOutputTokens`). */
  reserve?: number;
  /** The pre-prompt assembly's budget: the window less the reserve, the system prompt and the prompt. */
  preBudget?: number;
  /** What OpenClaw sends after the assembled messages in the newest loop call (the turn so far). */
  pending?: number;
  /** The tokens lossless assembled for the newest model call. */
  assembled?: number;
}

const TURNS = Symbol.for("lossless.openclaw.turns");
function turnOf(sessionId: string): Turn {
  const holder = globalThis as { [TURNS]?: Map<string, Turn> };
  const turns = (holder[TURNS] ??= new Map());
  let turn = turns.get(sessionId);
  if (!turn) {
    turn = {};
    turns.set(sessionId, turn);
  }
  return turn;
}

/** OpenClaw's own side runs (memory flush, internal agent runs) carry a copy of the user's
 * turns: they are passed through, never stored a second time. */
export function isInternal(params: { sessionId?: string; sessionKey?: string; sessionFile?: string }): boolean {
  return (
    (params.sessionId ?? "").startsWith("internal-session-effects-") ||
    /^agent:[^:]+:internal-session-effects:/.test(params.sessionKey ?? "") ||
    /[\\/]internal-agent-runs[\\/]/.test(params.sessionFile ?? "")
  );
}

/** A rough count of what OpenClaw holds (chars / 4), for what lossless does not assemble. */
function roughTokens(messages: unknown[]): number {
  return Math.ceil(JSON.stringify(messages).length / 4);
}

interface Limits {
  promptTokenBudget?: number | null;
  maxOutputTokens?: number | null;
}

function limitsOf(params: unknown): Limits {
  const limits = (params as { runtimeSettings?: { limits?: Limits } }).runtimeSettings?.limits;
  return limits ?? {};
}

function positive(value: unknown): number | undefined {
  return typeof value === "number" && Number.isFinite(value) && value > 0 ? Math.floor(value) : undefined;
}

/** The provider's count of the turn's last request, from the assistant message's usage. */
function promptTokensOf(messages: AgentMessage[]): number | undefined {
  for (let i = messages.length - 1; i >= 0; i--) {
    const usage = (messages[i] as { role?: string; usage?: Record<string, unknown> }).usage;
    if ((messages[i] as { role?: string }).role !== "assistant" || !usage) continue;
    const sum = ["input", "cacheRead", "cacheWrite"].reduce((total, key) => total + (positive(usage[key]) ?? 0), 0);
    return sum > 0 ? sum : undefined;
  }
  return undefined;
}

export function createEngine(config: LosslessConfig, version: string): ContextEngine {
  const rpc = () => client(config);
  const state = (sessionId: string) =>
    rpc().call<{ messages: number }>("bootstrap", { session_id: sessionId });

  // After the turn: the turn's messages, and what the provider's usage says of OpenClaw's
  // own part of the window (measured against what lossless assembled for that request).
  const afterTurn = async (sessionId: string, extra: Record<string, unknown>, promptTokens?: number, window?: number) => {
    const turn = turnOf(sessionId);
    const measured = window ?? turn.window;
    await rpc().call("after_turn", {
      session_id: sessionId,
      ...extra,
      window: measured,
      prompt_tokens: measured !== undefined ? promptTokens : undefined,
      pending_tokens: turn.pending ?? 0,
      assembled_tokens: turn.assembled,
      reply_tokens: turn.reserve,
    });
  };

  return {
    info: {
      id: ENGINE_ID,
      name: "lossless",
      version,
      // lossless compacts (into its summary DAG) and assembles; the host never rewrites.
      ownsCompaction: true,
      // The turn's messages reach commitTurn before anything of the next turn, and a retried
      // commit stores nothing twice (each message's key is the turn's key and its position).
      transcriptSemantics: {
        currentTurnFence: "before-current-turn-entry-v1",
        turnAdvancementIdempotency: "atomic-idempotent-v1",
      },
    },

    async bootstrap(params: Params<"bootstrap">): Promise<Result<"bootstrap">> {
      if (isInternal(params)) return { bootstrapped: true, importedMessages: 0 };
      // 2026.7 hands over its JSONL transcript. A session lossless has not stored yet (the
      // plugin installed mid-conversation) is imported from it; one it has is kept by the
      // turns themselves (afterTurn), which carry no transcript ids to match the file's by.
      // 2026.9 keeps transcripts in SQLite and names the session key here instead.
      const file = params.sessionFile;
      const known = await state(params.sessionId);
      const transcript = file && file.endsWith(".jsonl") && known.messages === 0 ? file : undefined;
      const made = await rpc().call<{ reports: { imported: number }[] }>("bootstrap", {
        session_id: params.sessionId,
        transcript,
      });
      const imported = made.reports.reduce((sum, r) => sum + (r.imported ?? 0), 0);
      return { bootstrapped: true, importedMessages: imported };
    },

    async ingest(params: Params<"ingest">): Promise<Result<"ingest">> {
      if (isInternal(params)) return { ingested: false };
      const done = await rpc().call<Ingested>("ingest", {
        session_id: params.sessionId,
        message: params.message,
        format: "openclaw",
      });
      return { ingested: done.inserted > 0 };
    },

    async ingestBatch(params: Params<"ingestBatch">): Promise<Result<"ingestBatch">> {
      if (isInternal(params)) return { ingestedCount: 0 };
      const done = await rpc().call<Ingested>("ingest_batch", {
        session_id: params.sessionId,
        messages: params.messages,
        format: "openclaw",
      });
      return { ingestedCount: done.inserted };
    },

    // 2026.9: the turn's messages, once the host has written them; retried under the same key
    // after a failure, so each message is keyed by the turn's key and its position.
    async commitTurn(params: Params<"commitTurn">): Promise<Result<"commitTurn">> {
      if (isInternal(params)) return { status: "committed" };
      const done = await rpc().call<Ingested>("ingest_batch", {
        session_id: params.sessionId,
        messages: params.messages,
        format: "openclaw",
        external_ids: params.messages.map((_, i) => `${params.advancementKey}:${i}`),
      });
      const context = params.runtimeContext as { modelContextWindow?: unknown; tokenBudget?: unknown } | undefined;
      const window = positive(context?.modelContextWindow) ?? positive(context?.tokenBudget);
      // The provider's count of the last request: OpenClaw's part, lossless's assembly, and
      // the turn before its last answer.
      await afterTurn(params.sessionId, {}, promptTokensOf(params.messages), window);
      return { status: done.inserted === 0 && done.skipped > 0 ? "duplicate" : "committed" };
    },

    // 2026.7: the whole session after a turn; the new messages follow prePromptMessageCount.
    async afterTurn(params: Params<"afterTurn">): Promise<void> {
      if (isInternal(params)) return;
      const fresh = params.messages.slice(params.prePromptMessageCount);
      const context = params.runtimeContext as { currentTokenCount?: unknown; tokenBudget?: unknown } | undefined;
      const window = positive(params.tokenBudget) ?? positive(context?.tokenBudget);
      await afterTurn(
        params.sessionId,
        { messages: fresh, format: "openclaw" },
        positive(context?.currentTokenCount) ?? promptTokensOf(fresh),
        window,
      );
    },

    async assemble(params: Params<"assemble">): Promise<Result<"assemble">> {
      if (isInternal(params)) {
        return { messages: params.messages, estimatedTokens: roughTokens(params.messages) };
      }
      const turn = turnOf(params.sessionId);
      const limits = limitsOf(params);
      const budget = positive(params.tokenBudget);
      // A session lossless has not seen (installed mid-conversation, or a turn the host ran
      // without it): take the host's history first, so nothing it holds is lost.
      const known = await state(params.sessionId);
      if (known.messages === 0 && params.messages.length > 0) {
        await rpc().call("ingest_batch", {
          session_id: params.sessionId,
          messages: params.messages,
          format: "openclaw",
        });
      }
      let request: Record<string, unknown>;
      if (positive(limits.maxOutputTokens) !== undefined) {
        // Before the prompt: OpenClaw's budget is the window less its reserve, its system
        // prompt and the prompt (not its tools); the loop's assembly below replaces this one.
        turn.reserve = positive(limits.maxOutputTokens);
        turn.preBudget = budget;
        const pending = params.prompt ? Math.ceil(params.prompt.length / 4) : 0;
        request =
          turn.window !== undefined
            ? { window: turn.window, token_budget: budget, pending_tokens: pending, reply_tokens: turn.reserve }
            : { token_budget: budget ?? DEFAULT_BUDGET };
        request.prompt = params.prompt ?? "";
      } else {
        // Before each model call: OpenClaw's budget is the whole window less the turn under
        // way. The messages get the room the window leaves them, less that turn.
        const window = positive(limits.promptTokenBudget) ?? budget;
        if (window === undefined) {
          request = { token_budget: DEFAULT_BUDGET };
        } else {
          const pending = budget !== undefined ? Math.max(0, window - budget) : 0;
          turn.window = window;
          turn.pending = pending;
          const hint =
            turn.preBudget !== undefined && turn.reserve !== undefined
              ? Math.max(0, window - turn.reserve - turn.preBudget - pending)
              : undefined;
          request = { window, pending_tokens: pending, reply_tokens: turn.reserve, overhead_hint: hint };
          // The turn's request goes after the assembled messages, sent by OpenClaw itself.
          if (params.prompt !== undefined || pending > 0) request.prompt = params.prompt ?? "";
        }
      }
      const made = await rpc().call<Assembled>("assemble", {
        session_id: params.sessionId,
        format: "openclaw",
        ...request,
      });
      turn.assembled = made.tokens;
      return { messages: made.messages, estimatedTokens: made.tokens };
    },

    async compact(params: Params<"compact">): Promise<Result<"compact">> {
      const context = params.runtimeContext as { tokenBudget?: unknown; currentTokenCount?: unknown } | undefined;
      const window = positive(params.tokenBudget) ?? positive(context?.tokenBudget);
      const current = positive(params.currentTokenCount) ?? positive(context?.currentTokenCount);
      if (isInternal(params) || window === undefined) {
        // A side run over a copy of the session, or nothing to measure the room by.
        return { ok: true, compacted: false, reason: "already under target: nothing of this session to compact here" };
      }
      const turn = turnOf(params.sessionId);
      const abort = params.abortSignal;
      const asked = rpc().call<HostCompaction>("compact_for_host", {
        session_id: params.sessionId,
        window,
        host_tokens: current,
        reply_tokens: turn.reserve,
        // A user's /compact: every pass that can run, then down to the target.
        full: params.compactionTarget === "threshold",
        instructions: params.customInstructions,
        format: "openclaw",
      });
      try {
        const done = await (abort
          ? Promise.race([
              asked,
              new Promise<never>((_, reject) => {
                const stop = () => {
                  // Between passes: the pass under way finishes or is not written.
                  void rpc().call("cancel_compaction", { session_id: params.sessionId }).catch(() => undefined);
                  reject(new Error("aborted"));
                };
                if (abort.aborted) stop();
                else abort.addEventListener("abort", stop, { once: true });
              }),
            ])
          : asked);
        return {
          ok: true,
          compacted: done.compacted,
          ...(done.reason ? { reason: done.reason } : {}),
          result: { tokensBefore: done.tokens_before, tokensAfter: done.tokens_after },
        };
      } catch (error) {
        asked.catch(() => undefined);
        const message = error instanceof Error ? error.message : String(error);
        return { ok: false, compacted: false, reason: `lossless could not compact: ${message}` };
      }
    },

    async maintain(): Promise<Result<"maintain">> {
      // lossless never rewrites the host's transcript.
      return { changed: false, bytesFreed: 0, rewrittenEntries: 0 };
    },

    async prepareSubagentSpawn(params: Params<"prepareSubagentSpawn">): Promise<Result<"prepareSubagentSpawn">> {
      // The sub-agent gets a conversation of its own; nothing to undo if the spawn fails.
      if (params.childSessionId) await state(params.childSessionId);
      return { rollback: () => undefined };
    },

    async onSubagentEnded(): Promise<void> {
      // Its conversation stays stored and searchable.
    },

    async dispose(): Promise<void> {
      release();
    },
  };
}
