// Copy, download and search of one execution's output. Copy and download read the whole log
// from the server (the terminal keeps only its scrollback); search looks in what is shown and,
// when that has no match, asks the server, which searches the whole log on disk.

import { api, readLog } from "./api.js";
import { el } from "./dom.js";
import { ANSI_SEQUENCE } from "./terminal.js";

// Lines of the whole log listed under the search box at most.
const LOG_MATCHES_SHOWN = 50;

// What a person pastes: the log as text, terminal control sequences and CRs removed.
export function logText(bytes) {
  const text = new TextDecoder("utf-8").decode(bytes);
  return text.replace(ANSI_SEQUENCE, "").replace(/\r+\n/g, "\n");
}

function sizeLabel(bytes) {
  return `${bytes.toLocaleString()} byte${bytes === 1 ? "" : "s"}`;
}

export class OutputTools {
  // root: the view's element; view: { executionId, terminal }; showStatus(text); showError(e).
  constructor(root, view, { showStatus, showError }) {
    this.view = view;
    this.showStatus = showStatus;
    this.showError = showError;
    this.searchText = root.querySelector(".search-text");
    this.searchStatus = root.querySelector(".search-status");
    this.logMatches = root.querySelector(".search-log-matches");
    // Each server search is numbered: an answer to an older query is dropped.
    this.logSearches = 0;
    this.findAsked = false;
    root.querySelector(".view-copy").addEventListener("click", () => this.#copy());
    root.querySelector(".view-download").addEventListener("click", () => this.#download());
    root.querySelector(".search-form").addEventListener("submit", (event) => {
      event.preventDefault();
      this.#find(false);
    });
    root.querySelector(".search-previous").addEventListener("click", () => this.#find(true));
    this.searchText.addEventListener("input", () => {
      this.findAsked = false;
      this.view.terminal?.clearSearch();
      this.searchStatus.textContent = "";
      delete this.searchStatus.dataset.count;
      this.#showLogMatches(null);
    });
  }

  attach(terminal) {
    terminal.onSearchResults(({ index, count }) => {
      this.searchStatus.dataset.count = String(count);
      this.searchStatus.textContent = count === 0 ? "no match" : `${index + 1} of ${count}`;
      // Only for a search asked for (clearing the highlights reports no match too).
      if (count === 0 && this.findAsked) this.#searchLog();
      else this.#showLogMatches(null);
    });
  }

  // Not in what the terminal holds: the lines of the whole log that have it, from the server.
  async #searchLog() {
    const query = this.searchText.value;
    if (!query) return;
    const asked = ++this.logSearches;
    const params = new URLSearchParams({ q: query, ignore_case: "true", limit: String(LOG_MATCHES_SHOWN) });
    try {
      const found = await api(`v1/executions/${encodeURIComponent(this.view.executionId)}/search?${params}`);
      if (asked !== this.logSearches) return;
      const count = found.matches.length;
      this.searchStatus.textContent = count === 0
        ? "no match in the whole log"
        : `not in view; ${count}${found.truncated ? "+" : ""} line${count === 1 ? "" : "s"} in the whole log`;
      this.#showLogMatches(found.matches);
    } catch (error) {
      if (asked === this.logSearches) this.showError(error);
    }
  }

  #showLogMatches(matches) {
    if (!matches) this.logSearches++;
    this.logMatches.replaceChildren(
      ...(matches || []).map((match) =>
        el("li", {}, [
          el("span", { class: "muted" }, match.line === null ? `@${match.offset}` : `line ${match.line}`),
          " ",
          el("code", {}, match.text),
        ]),
      ),
    );
    this.logMatches.hidden = !matches || matches.length === 0;
  }

  #find(backwards) {
    const query = this.searchText.value;
    if (!query || !this.view.terminal) return;
    this.findAsked = true;
    this.view.terminal.find(query, { backwards });
  }

  async #copy() {
    try {
      const { bytes, partial } = await readLog(this.view.executionId);
      await navigator.clipboard.writeText(logText(bytes));
      this.showStatus(`Copied ${sizeLabel(bytes.length)}${partial ? " (so far)" : ""}.`);
    } catch (error) {
      this.showError(error);
    }
  }

  async #download() {
    try {
      const { bytes, partial } = await readLog(this.view.executionId);
      // The raw bytes, byte-exact, as the log on the server holds them.
      const url = URL.createObjectURL(new Blob([bytes], { type: "application/octet-stream" }));
      const link = document.createElement("a");
      link.href = url;
      link.download = `${this.view.executionId}.log`;
      document.body.append(link);
      link.click();
      link.remove();
      setTimeout(() => URL.revokeObjectURL(url), 60_000);
      this.showStatus(`Downloaded ${sizeLabel(bytes.length)}${partial ? " (so far)" : ""}.`);
    } catch (error) {
      this.showError(error);
    }
  }
}
