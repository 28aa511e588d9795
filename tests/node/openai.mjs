// The openai JS SDK as its README shows it: a base URL, an API key, default headers.
import OpenAI from "openai";
import { converse, settings } from "./turns.mjs";

const client = new OpenAI({ baseURL: settings.baseURL, apiKey: settings.apiKey,
                            defaultHeaders: settings.headers, maxRetries: 0 });

await converse(async (messages) => {
  if (!settings.streamed) {
    const { data, response } = await client.chat.completions.create({ model: "mirror", messages }).withResponse();
    return { text: data.choices[0].message.content, mirror: data.mirror,
             namedBy: response.headers.get("x-mirror-named-by") };
  }
  const { data: stream, response } = await client.chat.completions
    .create({ model: "mirror", messages, stream: true }).withResponse();
  let text = "", mirror = null, chunks = 0;
  for await (const chunk of stream) {
    chunks += 1;
    text += chunk.choices[0]?.delta?.content ?? "";
    if (chunk.mirror) mirror = chunk.mirror;
  }
  return { text, mirror, chunks, namedBy: response.headers.get("x-mirror-named-by") };
});
