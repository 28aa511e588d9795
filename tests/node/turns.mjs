// The harness both clients share: settings from the environment, user messages from stdin (one a
// line; the test sends the next once Mirror has thought the last one through), one JSON line out
// per reply. Nothing Mirror-specific happens here: the client is configured only through its
// documented settings (a base URL, an API key, default headers).
import { createInterface } from "node:readline";

export const settings = {
  baseURL: process.env.MIRROR_BASE_URL,
  apiKey: process.env.MIRROR_TOKEN,
  headers: JSON.parse(process.env.MIRROR_HEADERS || "{}"),
  streamed: process.argv[2] === "streamed",
};

// Each line is a user turn; `answer(messages)` gets the whole transcript, as a chat app keeps it.
export async function converse(answer) {
  const messages = [];
  for await (const line of createInterface({ input: process.stdin })) {
    messages.push({ role: "user", content: line });
    const reply = await answer(messages);
    messages.push({ role: "assistant", content: reply.text });
    process.stdout.write(JSON.stringify(reply) + "\n");
  }
}
