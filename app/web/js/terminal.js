// Where output is shown: an xterm.js terminal when its files are served (`make console-deps`),
// otherwise a plain <pre> log. Both take raw bytes and share one small interface, search
// included: find(query, { backwards }) reports { index, count } through onSearchResults.

import { el } from "./dom.js";

const XTERM_ROOT = new URL("../vendor/xterm/", import.meta.url);
export const ANSI_SEQUENCE = /\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()][0-9A-B]|\x1b[=>]/g;

let xtermModules = null;

async function loadXterm() {
  if (!xtermModules) {
    xtermModules = Promise.all([
      import(new URL("xterm/lib/xterm.mjs", XTERM_ROOT).href),
      import(new URL("addon-fit/lib/addon-fit.mjs", XTERM_ROOT).href),
      import(new URL("addon-search/lib/addon-search.mjs", XTERM_ROOT).href),
    ]).then(([xterm, fit, search]) => {
      document.head.append(
        el("link", { rel: "stylesheet", href: new URL("xterm/css/xterm.css", XTERM_ROOT).href }),
      );
      return { Terminal: xterm.Terminal, FitAddon: fit.FitAddon, SearchAddon: search.SearchAddon };
    });
    // A failed load (no `make console-deps`, a blocked request) must not stick: the next view
    // tries again.
    xtermModules.catch(() => {
      xtermModules = null;
    });
  }
  return xtermModules;
}

export async function createTerminal(container, { pty }) {
  try {
    return new XtermView(container, await loadXterm(), pty);
  } catch (error) {
    console.warn("xterm.js is not available, showing a plain log:", error);
    return new PlainView(container);
  }
}

// Match highlights: the search addon paints them as decorations (and only then reports counts).
const SEARCH_DECORATIONS = {
  matchBackground: "#5c4b00",
  matchOverviewRuler: "#b58900",
  activeMatchBackground: "#d19a00",
  activeMatchColorOverviewRuler: "#ffd866",
};

class XtermView {
  constructor(container, { Terminal, FitAddon, SearchAddon }, pty) {
    this.kind = "xterm";
    this.term = new Terminal({
      allowProposedApi: true, // the search addon's decorations use the proposed API
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
    this.searchAddon = new SearchAddon();
    this.term.loadAddon(this.searchAddon);
    this.searchListeners = [];
    this.searchAddon.onDidChangeResults(({ resultIndex, resultCount }) => {
      for (const listener of this.searchListeners) {
        listener({ index: resultIndex, count: resultCount });
      }
    });
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

  onSearchResults(listener) {
    this.searchListeners.push(listener);
  }

  find(query, { backwards = false } = {}) {
    const options = { decorations: SEARCH_DECORATIONS };
    const found = backwards
      ? this.searchAddon.findPrevious(query, options)
      : this.searchAddon.findNext(query, options);
    if (!found) for (const listener of this.searchListeners) listener({ index: -1, count: 0 });
    return found;
  }

  clearSearch() {
    this.searchAddon.clearDecorations();
    this.term.clearSelection();
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
    this.searchListeners = [];
    this.matchIndex = -1;
    // Said, not silent: a server installed without its front-end packages looks broken else.
    const notice = el(
      "p",
      { class: "plain-notice muted", role: "note" },
      "Plain log view: the terminal (xterm.js) could not be loaded from this server. " +
        "Its operator installs it with `make console-deps` (npm) in the server's checkout.",
    );
    container.replaceChildren(notice, this.log);
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

  onSearchResults(listener) {
    this.searchListeners.push(listener);
  }

  // Selects the next (or previous) match after the current one, wrapping around; the browser's
  // selection shows it and scrolling brings it into view.
  find(query, { backwards = false } = {}) {
    const text = this.log.textContent;
    const starts = [];
    if (query) {
      const needle = query.toLowerCase();
      const haystack = text.toLowerCase();
      for (let at = haystack.indexOf(needle); at !== -1; at = haystack.indexOf(needle, at + 1)) {
        starts.push(at);
      }
    }
    if (starts.length === 0) {
      this.matchIndex = -1;
      this.#report(-1, 0);
      return false;
    }
    const step = backwards ? -1 : 1;
    this.matchIndex = this.matchIndex < 0 && backwards
      ? starts.length - 1
      : (this.matchIndex + step + starts.length) % starts.length;
    this.#select(starts[this.matchIndex], query.length);
    this.#report(this.matchIndex, starts.length);
    return true;
  }

  clearSearch() {
    this.matchIndex = -1;
    window.getSelection()?.removeAllRanges();
  }

  #report(index, count) {
    for (const listener of this.searchListeners) listener({ index, count });
  }

  #select(start, length) {
    const range = document.createRange();
    const walker = document.createTreeWalker(this.log, NodeFilter.SHOW_TEXT);
    let seen = 0;
    let startSet = false;
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const end = seen + node.data.length;
      if (!startSet && start < end) {
        range.setStart(node, start - seen);
        startSet = true;
      }
      if (startSet && start + length <= end) {
        range.setEnd(node, start + length - seen);
        break;
      }
      seen = end;
    }
    const selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
    range.startContainer.parentElement?.scrollIntoView({ block: "nearest" });
  }

  focus() {
    this.log.focus();
  }

  dispose() {
    this.container.replaceChildren();
  }
}
