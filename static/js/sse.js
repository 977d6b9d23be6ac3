// Server-Sent Events over fetch. EventSource can only GET, and sending a message is a POST whose
// response is the stream, so the stream is parsed here (the format: "event:" / "data:" lines,
// events separated by a blank line; sse-starlette ends lines with CRLF).

/** Yields each event's parsed JSON data, with `type` taken from the event name if missing and
 *  `_seq` from its id (the reply's events are numbered, so a reader can resume after one). */
export async function* readEvents(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  try {
    while (true) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value.replace(/\r\n?/g, "\n");
      let end;
      while ((end = buffer.indexOf("\n\n")) !== -1) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const event = parseBlock(block);
        if (event) yield event;
      }
    }
  } finally {
    // Leaving early (or after an abort) must not leave the connection half-read.
    reader.cancel().catch(() => {});
  }
}

function parseBlock(block) {
  let name = "message";
  let id = null;
  const data = [];
  for (const line of block.split("\n")) {
    if (line.startsWith(":")) continue; // a comment (keep-alive)
    const colon = line.indexOf(":");
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") name = value;
    else if (field === "id") id = value;
    else if (field === "data") data.push(value);
  }
  if (!data.length) return null;
  try {
    const event = JSON.parse(data.join("\n"));
    if (!event || typeof event !== "object") return null;
    if (!event.type) event.type = name;
    if (id !== null && /^\d+$/.test(id)) event._seq = Number(id);
    return event;
  } catch {
    return null; // not ours: ignore rather than break the reply
  }
}
