// Where output is shown: an xterm.js terminal when its files are served (`make console-deps`),
// otherwise a plain <pre> log. Both take raw bytes and share one small interface.

import { el } from "./dom.js";

const XTERM_ROOT = new URL("../vendor/xterm/", import.meta.url);
const ANSI_SEQUENCE = /\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()][0-9A-B]|\x1b[=>]/g;

let xtermModules = null;

async function loadXterm() {
  if (!xtermModules) {
    xtermModules = Promise.all([
      import(new URL("xterm/lib/xterm.mjs", XTERM_ROOT).href),
      import(new URL("addon-fit/lib/addon-fit.mjs", XTERM_ROOT).href),
    ]).then(([xterm, fit]) => {
      document.head.append(
        el("link", { rel: "stylesheet", href: new URL("xterm/css/xterm.css", XTERM_ROOT).href }),
      );
      return { Terminal: xterm.Terminal, FitAddon: fit.FitAddon };
    });
  }
  return xtermModules;
}

export async function createTerminal(container, { pty }) {
  try {
    const { Terminal, FitAddon } = await loadXterm();
    return new XtermView(container, Terminal, FitAddon, pty);
  } catch (error) {
    console.warn("xterm.js is not available, showing a plain log:", error);
    return new PlainView(container);
  }
}

class XtermView {
  constructor(container, Terminal, FitAddon, pty) {
    this.kind = "xterm";
    this.term = new Terminal({
      convertEol: !pty, // pipes carry bare \n; a PTY already sends \r\n
      disableStdin: !pty,
      cursorBlink: pty,
      scrollback: 10000,
      fontFamily: "ui-monospace, 'DejaVu Sans Mono', Menlo, Consolas, monospace",
      fontSize: 13,
      theme: { background: "#0f1419", foreground: "#e6e1cf" },
    });
    this.fitAddon = new FitAddon();
    this.term.loadAddon(this.fitAddon);
    container.replaceChildren();
    container.dataset.kind = this.kind;
    this.term.open(container);
    this.container = container;
    this.fit();
    this.observer = new ResizeObserver(() => this.fit());
    this.observer.observe(container);
  }

  fit() {
    // fit() throws while the element is hidden (no size to measure); the next resize retries.
    try {
      this.fitAddon.fit();
    } catch {
      /* not laid out yet */
    }
  }

  write(bytes) {
    this.term.write(bytes);
  }

  note(text) {
    this.term.write(`\r\n\x1b[2m${text}\x1b[0m\r\n`);
  }

  onInput(callback) {
    this.term.onData(callback);
  }

  onResize(callback) {
    this.term.onResize(({ rows, cols }) => callback(rows, cols));
  }

  get size() {
    return { rows: this.term.rows, cols: this.term.cols };
  }

  focus() {
    this.term.focus();
  }

  dispose() {
    this.observer.disconnect();
    this.term.dispose();
    this.container.replaceChildren();
  }
}

class PlainView {
  constructor(container) {
    this.kind = "plain";
    this.decoder = new TextDecoder("utf-8");
    this.log = el("pre", { class: "plain-log", tabindex: "0", "aria-label": "Output" });
    container.replaceChildren(this.log);
    container.dataset.kind = this.kind;
    this.container = container;
  }

  write(bytes) {
    const text = this.decoder.decode(bytes, { stream: true });
    const pinned = this.log.scrollTop + this.log.clientHeight >= this.log.scrollHeight - 4;
    this.log.append(text.replace(ANSI_SEQUENCE, "").replace(/\r+\n/g, "\n"));
    if (pinned) this.log.scrollTop = this.log.scrollHeight;
  }

  note(text) {
    this.log.append(el("span", { class: "note" }, `\n${text}\n`));
  }

  onInput() {} // typed input goes through the line form instead

  onResize() {}

  get size() {
    return null;
  }

  focus() {
    this.log.focus();
  }

  dispose() {
    this.container.replaceChildren();
  }
}
