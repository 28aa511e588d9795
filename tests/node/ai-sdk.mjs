// The Vercel AI SDK's OpenAI-compatible provider as its docs show it: a name, a base URL, an API
// key, headers; generateText for a plain reply, streamText for a streamed one.
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { generateText, streamText } from "ai";
import { converse, settings } from "./turns.mjs";

const mirror = createOpenAICompatible({ name: "mirror", baseURL: settings.baseURL, apiKey: settings.apiKey,
                                        headers: settings.headers });

await converse(async (messages) => {
  if (!settings.streamed) {
    const result = await generateText({ model: mirror("mirror"), messages, maxRetries: 0 });
    return { text: result.text, namedBy: result.response.headers?.["x-mirror-named-by"] ?? null };
  }
  const result = streamText({ model: mirror("mirror"), messages, maxRetries: 0,
                              onError: ({ error }) => { throw error; } });
  let text = "", chunks = 0;
  for await (const part of result.textStream) {
    chunks += 1;
    text += part;
  }
  const response = await result.response;
  return { text, chunks, namedBy: response.headers?.["x-mirror-named-by"] ?? null };
});
