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
  },
};
