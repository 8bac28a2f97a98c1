// One agent turn with long-term memory: retrieve what HRT knows before answering, add the turn
// after. Any OpenAI-compatible chat endpoint (OpenAI, llama.cpp's server, vLLM, Ollama, ...).
//
//   HRT_URL=http://127.0.0.1:8080 HRT_API_KEY=... \
//   OPENAI_BASE_URL=https://api.openai.com/v1 OPENAI_API_KEY=... MODEL=gpt-4o-mini \
//   node examples/agent-turn.mjs u-maya s-2026-01-05 "What did I decide about the Phoenix launch?"
import { HRTClient } from "@hrt/client"; // from a checkout: "../dist/index.js"

const [userId, sessionId, question] = process.argv.slice(2);
const hrt = HRTClient.fromEnv(process.env);

// 1. before the answer: the memory context, as one compact text within a token budget
const ctx = await hrt.retrieve({
  user_id: userId,
  query: question,
  render: { format: "compact", max_tokens: 1500 },
  // narrow with metadata filters when the agent knows more, e.g.
  // filters: { metadata: { and: [{ project: "phoenix" }, { priority: { gte: 2 } }] } },
});
const memory = ctx.retrieval_metadata.rendered?.text ?? "";

// 2. the answer, from any OpenAI-compatible endpoint
const base = (process.env.OPENAI_BASE_URL ?? "https://api.openai.com/v1").replace(/\/+$/, "");
const chat = await fetch(`${base}/chat/completions`, {
  method: "POST",
  headers: { "content-type": "application/json", authorization: `Bearer ${process.env.OPENAI_API_KEY ?? ""}` },
  body: JSON.stringify({
    model: process.env.MODEL ?? "gpt-4o-mini",
    messages: [
      { role: "system", content: `You are a helpful assistant. What you remember about the user:\n${memory}` },
      { role: "user", content: question },
    ],
  }),
});
if (!chat.ok) throw new Error(`the chat endpoint answered ${chat.status}: ${await chat.text()}`);
const answer = (await chat.json()).choices[0].message.content;
console.log(answer);

// 3. after the answer: the turn goes into memory (appended after the session's last message)
const added = await hrt.addMessages(userId, sessionId, [
  { role: "user", content: question },
  { role: "assistant", content: answer },
]);
console.error(`remembered: ${added.messages.map((m) => `${m.muid} ${m.status}`).join(", ")}`);
