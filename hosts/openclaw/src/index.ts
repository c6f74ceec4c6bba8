// The lossless plugin for OpenClaw: a context engine (plugins.slots.contextEngine: "lossless")
// and the recall tools, both over `lossless serve`.

import { readFileSync } from "node:fs";

import type { AnyAgentTool, OpenClawPluginApi } from "openclaw/plugin-sdk/plugin-entry";

import { client, type LosslessConfig } from "./client.js";
import { createEngine, ENGINE_ID } from "./engine.js";

interface ToolDeclaration {
  name: string;
  description: string;
  parameters: Record<string, unknown>;
}

// The recall tools as lossless declares them (tools.json is made from that one declaration).
const TOOLS: ToolDeclaration[] = JSON.parse(
  readFileSync(new URL("../tools.json", import.meta.url), "utf8"),
) as ToolDeclaration[];
const VERSION = (
  JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as { version: string }
).version;

function recallTool(declared: ToolDeclaration, config: LosslessConfig, sessionId: string | undefined): AnyAgentTool {
  return {
    name: declared.name,
    label: declared.name,
    description: declared.description,
    parameters: declared.parameters,
    // Offered to the model directly, not behind OpenClaw's tool search.
    catalogMode: "direct-only",
    async execute(_toolCallId: string, params: unknown) {
      if (!sessionId) throw new Error("lossless: this tool runs inside a session; none is active");
      const found = await client(config).call<Record<string, unknown>>("call_tool", {
        name: declared.name,
        arguments: params ?? {},
        session_id: sessionId,
      });
      return { content: [{ type: "text" as const, text: JSON.stringify(found) }], details: found };
    },
  } as AnyAgentTool;
}

interface Pending {
  provisional: number;
  oldest_age_seconds: number | null;
  summarizer: string;
  model_summaries: boolean;
  fell_back: { conversation_id: number; at?: string; summaries?: number; reason?: string }[];
}

// What `/lossless` says: the session's messages and summaries, and what waits for the model
// (provisional summaries, the oldest one's age, a model that kept failing and why).
export async function statusText(config: LosslessConfig, sessionId: string | undefined): Promise<string> {
  let state: Record<string, unknown>;
  try {
    state = await client(config).call<Record<string, unknown>>("status", sessionId ? { session_id: sessionId } : {});
  } catch (error) {
    if (!sessionId) throw error;
    state = await client(config).call<Record<string, unknown>>("status", {}); // not stored yet
  }
  const pending = state.summaries_pending as Pending;
  const lines: string[] = [];
  if (typeof state.session_id === "string") {
    lines.push(`lossless: this session has ${String(state.messages)} messages stored, ${String(state.summaries ?? 0)} summaries`);
  } else {
    lines.push(`lossless ${String(state.version ?? "")}: the store holds ${String(state.messages)} messages`);
  }
  if (pending.provisional > 0) {
    const age = pending.oldest_age_seconds === null ? "" : `, the oldest ${Math.round(pending.oldest_age_seconds)} s old`;
    lines.push(`${pending.provisional} summaries provisional${age}: the ${pending.summarizer} summarizer's replace them off the turn`);
  } else {
    lines.push(pending.model_summaries ? `no summary waits for the ${pending.summarizer} summarizer` : `summarizer ${pending.summarizer} (offline)`);
  }
  for (const failed of pending.fell_back) {
    lines.push(`the summarizer kept failing (${failed.at ?? "?"}): ${failed.summaries ?? "?"} summaries kept as the offline summarizer wrote them; ${failed.reason ?? ""}`);
  }
  return lines.join("\n");
}

export default {
  id: ENGINE_ID,
  name: "lossless",
  description: "Lossless context management: every message kept, old context summarized into a DAG you can search and expand.",
  register(api: OpenClawPluginApi): void {
    const config = (api.pluginConfig ?? {}) as LosslessConfig;
    api.registerContextEngine(ENGINE_ID, () => createEngine(config, VERSION));
    api.registerTool((ctx) => TOOLS.map((declared) => recallTool(declared, config, ctx.sessionId)), {
      names: TOOLS.map((t) => t.name),
    });
    api.registerCommand({
      name: "lossless",
      description: "lossless: what is stored for this session, and what waits for the summarizer model",
      handler: async (ctx) => ({ text: await statusText(config, ctx.sessionId) }),
    });
  },
};
