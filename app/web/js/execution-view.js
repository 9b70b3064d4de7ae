// One execution in a tab of its own: its live output, its state, and the controls a human
// needs (keyboard input and resize for PTY runs, Ctrl-C, Cancel, copy, download, search) when
// the caller may drive it (its owner or an admin). While it awaits an approval the tab says so,
// with the policy's reason, in place of a terminal with nothing to show yet; the output takes
// its place when it runs. Each open tab is one ExecutionView built from the page's template.

import { api } from "./api.js";
import { el, showError, timeEl, visibleText } from "./dom.js";
import { OutputTools } from "./output-tools.js";
import { ExecutionStream } from "./stream.js";
import { createTerminal } from "./terminal.js";

const ACTIVE_STATES = new Set(["awaiting_approval", "running"]);

function describeExit({ state, exit_code: exitCode, signal }) {
  const parts = [state];
  if (exitCode !== null && exitCode !== undefined) parts.push(`exit code ${exitCode}`);
  if (signal !== null && signal !== undefined) parts.push(`signal ${signal}`);
  return parts.join(", ");
}

export function durationText(execution, now = Date.now()) {
  if (!execution.started_at) return null;
  const end = execution.finished_at ? Date.parse(execution.finished_at) : now;
  const seconds = Math.max(0, (end - Date.parse(execution.started_at)) / 1000);
  if (seconds < 10) return `${seconds.toFixed(seconds < 1 ? 2 : 1)} s`;
  if (seconds < 120) return `${Math.round(seconds)} s`;
  const minutes = Math.floor(seconds / 60);
  if (minutes < 120) return `${minutes} min ${Math.round(seconds % 60)} s`;
  return `${Math.floor(minutes / 60)} h ${minutes % 60} min`;
}

export class ExecutionView {
  constructor(executionId, { template, onChanged, onLabel, mayControl }) {
    this.executionId = executionId;
    this.onChanged = onChanged;
    this.onLabel = onLabel;
    // mayControl(execution): whether the server lets this caller drive it (input, resize,
    // signals, cancel); without it those controls are not offered.
    this.mayControl = mayControl;
    this.controls = false;
    this.state = null;
    this.root = template.content.firstElementChild.cloneNode(true);
    this.root.dataset.executionId = executionId;
    this.root.hidden = true;
    const part = (name) => this.root.querySelector(`.${name}`);
    this.idEl = part("view-id");
    this.stateEl = part("view-state");
    this.factsEl = part("view-facts");
    this.commandEl = part("view-command");
    this.errorEl = part("view-error");
    this.toolStatus = part("tool-status");
    this.toolsEl = part("output-tools");
    this.container = part("view-terminal");
    this.waitingEl = part("view-waiting");
    this.waitingReason = part("waiting-reason");
    this.waitingExpires = part("waiting-expires");
    this.lineForm = part("line-input");
    this.lineText = part("line-input-text");
    this.interruptButton = part("view-interrupt");
    this.cancelButton = part("view-cancel");
    this.execution = null;
    this.stream = null;
    this.terminal = null;
    this.closed = false;
    this.tools = new OutputTools(this.root, this, {
      showStatus: (text) => {
        this.toolStatus.textContent = text;
      },
      showError: (error) => showError(this.errorEl, error),
    });

    this.idEl.textContent = executionId;
    this.interruptButton.addEventListener("click", () => this.#interrupt());
    this.cancelButton.addEventListener("click", () => this.#cancel());
    this.lineForm.addEventListener("submit", (event) => {
      event.preventDefault();
      // A PTY's Enter key is a carriage return; the terminal driver turns it into a newline.
      this.#sendInput(`${this.lineText.value}\r`);
      this.lineText.value = "";
    });
  }

  async open() {
    this.#setState("loading…", null);
    let execution;
    try {
      execution = await api(`v1/executions/${encodeURIComponent(this.executionId)}`);
    } catch (error) {
      showError(this.errorEl, error);
      this.#setState("unavailable", null);
      return;
    }
    if (this.closed) return;
    this.execution = execution;
    this.controls = this.mayControl(execution);
    this.interruptButton.hidden = !this.controls;
    this.cancelButton.hidden = !this.controls;
    this.commandEl.replaceChildren(...visibleText(execution.command));
    this.#renderWaiting(execution.approval);
    this.#setState(execution.state, execution);
    this.#renderFacts(execution);
    this.onLabel?.(execution.command);
    const terminal = await createTerminal(this.container, { pty: execution.pty });
    if (this.closed) {
      terminal.dispose();
      return;
    }
    this.terminal = terminal;
    this.tools.attach(terminal);
    this.lineForm.hidden = !(execution.pty && terminal.kind === "plain" && this.controls);
    if (execution.pty && this.controls) {
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
        this.#refreshFacts();
        this.onChanged();
      },
      onStatus: (status) => {
        this.root.dataset.stream = status;
      },
      onError: (message) => showError(this.errorEl, new Error(message)),
      onOpen: () => {
        this.container.dataset.connects = String(this.stream.connects);
        if (this.state === "running") this.#sendSize();
      },
    });
    this.stream.start();
  }

  // Shown or hidden by its tab; a shown PTY terminal takes the keyboard.
  show(visible) {
    this.root.hidden = !visible;
    if (visible) {
      this.terminal?.fit?.();
      if (this.execution?.pty) this.terminal?.focus();
    }
  }

  get label() {
    return this.execution?.command ?? this.executionId;
  }

  close() {
    this.closed = true;
    this.stream?.stop();
    this.terminal?.dispose();
    this.stream = null;
    this.terminal = null;
    this.root.remove();
  }

  #renderFacts(execution) {
    const duration = execution.finished_at ? durationText(execution) : null;
    // replaceChildren() writes a null as the text "null": leave the duration out instead.
    const facts = [el("span", {}, `owner ${execution.owner}`)];
    if (duration) facts.push(el("span", { class: "view-duration" }, ` · ${duration}`));
    this.factsEl.replaceChildren(...facts);
  }

  async #refreshFacts() {
    try {
      this.#renderFacts(await api(`v1/executions/${encodeURIComponent(this.executionId)}`));
    } catch {
      /* the facts are a convenience; the state line already says how it ended */
    }
  }

  // The policy's reason for holding it and when the approval expires, shown while it waits.
  #renderWaiting(approval) {
    this.waitingReason.replaceChildren(...visibleText(approval?.reason ?? ""));
    this.waitingReason.hidden = !approval?.reason;
    this.waitingExpires.replaceChildren(approval ? timeEl(approval.expires_at) : "");
    this.waitingExpires.parentElement.hidden = !approval;
  }

  #setState(state, details) {
    const wasWaiting = this.state === "awaiting_approval";
    this.state = state;
    const waiting = state === "awaiting_approval";
    this.waitingEl.hidden = !waiting;
    this.container.hidden = waiting;
    this.toolsEl.hidden = waiting; // nothing to copy, download or search yet
    if (wasWaiting && !waiting) {
      // Laid out only now: the terminal takes its real size, and a PTY that just started
      // learns it (a resize before the process exists is refused).
      this.terminal?.fit?.();
      if (state === "running") this.#sendSize();
    }
    this.stateEl.dataset.state = state;
    this.stateEl.textContent =
      details && !ACTIVE_STATES.has(state) ? describeExit({ ...details, state }) : state;
    const active = ACTIVE_STATES.has(state);
    // No process yet while it waits: a signal would be refused; a cancel withdraws the request.
    this.interruptButton.disabled = state !== "running";
    this.cancelButton.disabled = !active;
  }

  #sendSize() {
    const size = this.terminal?.size;
    if (this.execution?.pty && this.controls && size) this.#sendResize(size.rows, size.cols);
  }

  #sendResize(rows, cols) {
    if (this.state !== "running") return; // no process yet (or any more) to take the size
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
    try {
      const execution = await api(
        `v1/executions/${encodeURIComponent(this.executionId)}/cancel`,
        { method: "POST" },
      );
      if (!this.closed) this.#setState(execution.state, execution);
      this.onChanged();
    } catch (error) {
      showError(this.errorEl, error);
    }
  }
}
