// One execution's output stream: the WebSocket protocol, reconnection from the last byte offset,
// and the byte bookkeeping that makes a reconnect lose and repeat nothing.

import { backoff, openSocket, refusal } from "./api.js";

const encoder = new TextEncoder();
const FIRST_RETRY_MS = 250;

function decodeBase64(text) {
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let index = 0; index < binary.length; index += 1) bytes[index] = binary.charCodeAt(index);
  return bytes;
}

export class ExecutionStream {
  // handlers: onBytes(Uint8Array, stream), onGap(from, to), onState(state), onExit(frame),
  // onStatus("connecting" | "live" | "reconnecting" | "closed"), onError(message), onOpen().
  constructor(executionId, handlers) {
    this.executionId = executionId;
    this.handlers = handlers;
    this.nextOffset = 0;
    this.connects = 0;
    this.exited = false;
    this.stopped = false;
    this.socket = null;
    this.retryMs = FIRST_RETRY_MS;
    this.retryTimer = null;
  }

  start() {
    this.#connect();
  }

  stop() {
    this.stopped = true;
    clearTimeout(this.retryTimer);
    if (this.socket) this.socket.close(1000);
    this.socket = null;
  }

  get open() {
    return this.socket !== null && this.socket.readyState === WebSocket.OPEN;
  }

  // Returns false when the socket is down, so the caller can use the REST route instead.
  send(frame) {
    if (!this.open) return false;
    this.socket.send(JSON.stringify(frame));
    return true;
  }

  async #connect() {
    if (this.stopped) return;
    this.handlers.onStatus(this.connects === 0 ? "connecting" : "reconnecting");
    let socket;
    try {
      socket = await openSocket(
        `v1/executions/${encodeURIComponent(this.executionId)}/stream`,
        { offset: this.nextOffset },
      );
    } catch (error) {
      if (error.status === 401 || error.status === 403) {
        this.#giveUp(error.message);
      } else {
        this.#retry();
      }
      return;
    }
    if (this.stopped) {
      socket.close(1000);
      return;
    }
    this.connects += 1;
    this.socket = socket;
    socket.addEventListener("open", () => {
      this.handlers.onStatus("live");
      this.handlers.onOpen?.();
    });
    socket.addEventListener("message", (event) => {
      if (this.socket !== socket) return; // stopped: frames still in flight are not ours
      this.retryMs = FIRST_RETRY_MS;
      this.#handle(JSON.parse(event.data));
    });
    socket.addEventListener("close", (event) => {
      if (this.socket !== socket) return;
      this.socket = null;
      if (this.stopped || this.exited) {
        this.handlers.onStatus("closed");
        return;
      }
      const refused = refusal(event);
      if (refused) {
        this.#giveUp(refused);
        return;
      }
      this.#retry();
    });
  }

  #retry() {
    if (this.stopped) return;
    this.handlers.onStatus("reconnecting");
    this.retryTimer = setTimeout(() => this.#connect(), this.retryMs);
    this.retryMs = backoff(this.retryMs);
  }

  #giveUp(message) {
    this.stopped = true;
    this.handlers.onError(message);
    this.handlers.onStatus("closed");
  }

  #handle(frame) {
    switch (frame.type) {
      case "output":
        this.#output(frame);
        break;
      case "gap":
        // The log dropped bytes (artifact cap): say so once and carry on after them.
        if (frame.to > this.nextOffset) {
          this.handlers.onGap(Math.max(frame.from, this.nextOffset), frame.to);
          this.nextOffset = frame.to;
        }
        break;
      case "state":
        this.handlers.onState(frame.state);
        break;
      case "exit":
        this.exited = true;
        this.handlers.onExit(frame);
        this.socket?.close(1000);
        break;
      case "error":
        this.handlers.onError(frame.message ?? frame.code ?? "stream error");
        break;
      default:
        break; // "ping" and anything newer than this console
    }
  }

  #output(frame) {
    let bytes = frame.encoding === "base64" ? decodeBase64(frame.data) : encoder.encode(frame.data);
    const start = frame.offset;
    const end = start + bytes.length;
    if (end <= this.nextOffset) return; // replayed after a reconnect: already shown
    if (start > this.nextOffset) {
      this.handlers.onGap(this.nextOffset, start);
    } else if (start < this.nextOffset) {
      bytes = bytes.subarray(this.nextOffset - start);
    }
    this.nextOffset = end;
    this.handlers.onBytes(bytes, frame.stream);
  }
}
