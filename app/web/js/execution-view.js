// The execution view: one execution's live output, its state, and the controls a human needs
// (keyboard input and resize for PTY runs, Ctrl-C, Cancel).

import { api } from "./api.js";
import { byId, showError } from "./dom.js";
import { ExecutionStream } from "./stream.js";
import { createTerminal } from "./terminal.js";

const ACTIVE_STATES = new Set(["awaiting_approval", "running"]);

function describeExit({ state, exit_code: exitCode, signal }) {
  const parts = [state];
  if (exitCode !== null && exitCode !== undefined) parts.push(`exit code ${exitCode}`);
  if (signal !== null && signal !== undefined) parts.push(`signal ${signal}`);
  return parts.join(", ");
}

export class ExecutionView {
  constructor({ onChanged }) {
    this.onChanged = onChanged;
    this.section = byId("execution-view");
    this.idEl = byId("view-id");
    this.stateEl = byId("view-state");
    this.commandEl = byId("view-command");
    this.errorEl = byId("view-error");
    this.container = byId("terminal");
    this.lineForm = byId("line-input");
    this.lineText = byId("line-input-text");
    this.interruptButton = byId("view-interrupt");
    this.cancelButton = byId("view-cancel");
    this.generation = 0;
    this.execution = null;
    this.stream = null;
    this.terminal = null;

    this.interruptButton.addEventListener("click", () => this.#interrupt());
    this.cancelButton.addEventListener("click", () => this.#cancel());
    byId("view-close").addEventListener("click", () => this.close());
    this.lineForm.addEventListener("submit", (event) => {
      event.preventDefault();
      // A PTY's Enter key is a carriage return; the terminal driver turns it into a newline.
      this.#sendInput(`${this.lineText.value}\r`);
      this.lineText.value = "";
    });
  }

  get executionId() {
    return this.execution?.id ?? null;
  }

  async open(executionId) {
    this.close();
    const generation = ++this.generation;
    this.section.hidden = false;
    // The view sits below the lists; xterm.js also pauses drawing while it is off-screen.
    this.section.scrollIntoView({ block: "nearest" });
    this.idEl.textContent = executionId;
    this.commandEl.textContent = "";
    this.#setState("loading…", null);
    let execution;
    try {
      execution = await api(`v1/executions/${encodeURIComponent(executionId)}`);
    } catch (error) {
      showError(this.errorEl, error);
      this.#setState("unavailable", null);
      return;
    }
    if (generation !== this.generation) return;
    this.execution = execution;
    this.commandEl.textContent = execution.command;
    this.#setState(execution.state, execution);
    const terminal = await createTerminal(this.container, { pty: execution.pty });
    if (generation !== this.generation) {
      terminal.dispose();
      return;
    }
    this.terminal = terminal;
    this.lineForm.hidden = !(execution.pty && terminal.kind === "plain");
    if (execution.pty) {
      terminal.onInput((data) => this.#sendInput(data));
      terminal.onResize((rows, cols) => this.#sendResize(rows, cols));
    }
    this.stream = new ExecutionStream(execution.id, {
      onBytes: (bytes) => {
        terminal.write(bytes);
        this.container.dataset.offset = String(this.stream.nextOffset);
      },
      onGap: (from, to) => terminal.note(`[${to - from} bytes of output were dropped]`),
      onState: (state) => this.#setState(state, null),
      onExit: (frame) => {
        this.#setState(frame.state, frame);
        terminal.note(`[${describeExit(frame)}]`);
        this.onChanged();
      },
      onStatus: (status) => {
        this.section.dataset.stream = status;
      },
      onError: (message) => showError(this.errorEl, new Error(message)),
      onOpen: () => {
        this.container.dataset.connects = String(this.stream.connects);
        const size = terminal.size;
        if (execution.pty && size) this.#sendResize(size.rows, size.cols);
      },
    });
    this.stream.start();
    if (execution.pty) terminal.focus();
  }

  close() {
    this.generation += 1;
    this.stream?.stop();
    this.terminal?.dispose();
    this.stream = null;
    this.terminal = null;
    this.execution = null;
    this.section.hidden = true;
    this.lineForm.hidden = true;
    showError(this.errorEl, null);
    delete this.container.dataset.offset;
    delete this.container.dataset.connects;
    delete this.container.dataset.size;
  }

  #setState(state, details) {
    this.stateEl.dataset.state = state;
    this.stateEl.textContent = details && !ACTIVE_STATES.has(state) ? describeExit({ ...details, state }) : state;
    const active = ACTIVE_STATES.has(state);
    this.interruptButton.disabled = !active;
    this.cancelButton.disabled = !active;
  }

  #sendResize(rows, cols) {
    if (this.stream?.send({ type: "resize", rows, cols })) {
      this.container.dataset.size = `${rows}x${cols}`;
    }
  }

  async #sendInput(data) {
    if (this.stream?.send({ type: "input", data })) return;
    // The socket is between reconnects: the REST route keeps keystrokes from being dropped.
    try {
      await api(`v1/executions/${encodeURIComponent(this.executionId)}/input`, {
        method: "POST",
        body: { data },
      });
    } catch (error) {
      showError(this.errorEl, error);
    }
  }

  #interrupt() {
    if (!this.stream?.send({ type: "signal", signal: "INT" })) {
      showError(this.errorEl, new Error("Not connected: Ctrl-C was not sent."));
    }
  }

  async #cancel() {
    const id = this.executionId;
    if (!id) return;
    try {
      const execution = await api(`v1/executions/${encodeURIComponent(id)}/cancel`, {
        method: "POST",
      });
      if (id === this.executionId) this.#setState(execution.state, execution);
      this.onChanged();
    } catch (error) {
      showError(this.errorEl, error);
    }
  }
}
