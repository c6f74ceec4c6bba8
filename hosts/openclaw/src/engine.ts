// OpenClaw's ContextEngine over `lossless serve`: every turn stored exactly, the context the
// model sees assembled by lossless (summaries, then the newest turns), compaction lossless's.

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

interface CompactionReport {
  tokens_before: number;
  tokens_after: number;
  passes: unknown[];
}

/** The budget a turn's context is assembled within when the host names none. */
const DEFAULT_BUDGET = 100_000;

export function createEngine(config: LosslessConfig, version: string): ContextEngine {
  const rpc = () => client(config);
  const state = (sessionId: string) =>
    rpc().call<{ messages: number }>("bootstrap", { session_id: sessionId });

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
      const done = await rpc().call<Ingested>("ingest", {
        session_id: params.sessionId,
        message: params.message,
        format: "openclaw",
      });
      return { ingested: done.inserted > 0 };
    },

    async ingestBatch(params: Params<"ingestBatch">): Promise<Result<"ingestBatch">> {
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
      const done = await rpc().call<Ingested>("ingest_batch", {
        session_id: params.sessionId,
        messages: params.messages,
        format: "openclaw",
        external_ids: params.messages.map((_, i) => `${params.advancementKey}:${i}`),
      });
      await rpc().call("after_turn", {
        session_id: params.sessionId,
        token_budget: budgetOf(params.runtimeContext),
      });
      return { status: done.inserted === 0 && done.skipped > 0 ? "duplicate" : "committed" };
    },

    // 2026.7: the whole session after a turn; the new messages follow prePromptMessageCount.
    async afterTurn(params: Params<"afterTurn">): Promise<void> {
      const fresh = params.messages.slice(params.prePromptMessageCount);
      await rpc().call("after_turn", {
        session_id: params.sessionId,
        messages: fresh,
        format: "openclaw",
        token_budget: params.tokenBudget ?? budgetOf(params.runtimeContext),
      });
    },

    async assemble(params: Params<"assemble">): Promise<Result<"assemble">> {
      const budget = params.tokenBudget ?? DEFAULT_BUDGET;
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
      const made = await rpc().call<Assembled>("assemble", {
        session_id: params.sessionId,
        token_budget: budget,
        format: "openclaw",
      });
      return { messages: made.messages, estimatedTokens: made.tokens };
    },

    async compact(params: Params<"compact">): Promise<Result<"compact">> {
      const budget = params.tokenBudget ?? DEFAULT_BUDGET;
      const report = await rpc().call<CompactionReport>("compact", {
        session_id: params.sessionId,
        mode: "full",
        // Asked because the context overflowed: down to half the budget, as a turn would.
        until: params.force ? Math.max(1, Math.floor(budget / 2)) : undefined,
        token_budget: budget,
      });
      return {
        ok: true,
        compacted: report.passes.length > 0,
        result: { tokensBefore: report.tokens_before, tokensAfter: report.tokens_after },
      };
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

function budgetOf(context: unknown): number | undefined {
  const budget = (context as { tokenBudget?: unknown } | undefined)?.tokenBudget;
  return typeof budget === "number" && budget > 0 ? budget : undefined;
}
