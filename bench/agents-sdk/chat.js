// Benchmark only: the Agents SDK's AIChatAgent (npm @cloudflare/ai-chat, where the `agents`
// package moved it) answering from the same fake OpenAI-compatible provider as threadline's
// chat agent, through the AI SDK (npm `ai`, `@ai-sdk/openai-compatible`), its SQL metered.
//
// How it is driven (as its own client, useAgentChat, does): a WebSocket to /_chat/{name}
// (routed to the agent of that name), then one text frame
//   {"type": "cf_agent_use_chat_request", "id": <request id>,
//    "init": {"method": "POST", "body": "{\"messages\": [<UIMessage>...],
//                                         \"trigger\": \"submit-message\"}"}}
// carrying the whole transcript (the earlier messages as GET /_chat/{name}/get-messages
// returns them, then the new user message). The agent answers with frames
//   {"type": "cf_agent_use_chat_response", "id": <request id>, "body": <one UI message
//    stream chunk as JSON: start, text-start, text-delta, ..., finish>, "done": false}
// and a last one with "done": true once the assistant message is persisted.
// GET /_chat/{name}/meter reads the SQL counters without running SQL.
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { AIChatAgent } from "@cloudflare/ai-chat";
import { convertToModelMessages, streamText } from "ai";
import { installMeter } from "./meter.js";

export class BenchChat extends AIChatAgent {
  constructor(ctx, env) {
    const raw = installMeter(ctx);
    super(ctx, env);
    this.raw = raw;
    this.meter = raw.meter;
  }

  async onChatMessage() {
    const provider = createOpenAICompatible({
      name: "fake",
      baseURL: this.env.MODEL_URL,
      apiKey: "sk-bench",
    });
    const result = streamText({
      model: provider.chatModel("fake-model"),
      messages: await convertToModelMessages(this.messages),
    });
    return result.toUIMessageStreamResponse();
  }

  async onRequest(request) {
    const op = new URL(request.url).pathname.split("/").pop();
    if (op === "meter") {
      return Response.json({ meter: this.meter, alarm: await this.raw.getAlarm(), now: Date.now() });
    }
    return Response.json({ error: `no op ${op}` }, { status: 404 });
  }
}
