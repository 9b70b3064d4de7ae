// Copy, download and search of one execution's output. Copy and download read the whole log
// from the server (the terminal keeps only its scrollback); search looks in what is shown.

import { readLog } from "./api.js";
import { ANSI_SEQUENCE } from "./terminal.js";

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
    root.querySelector(".view-copy").addEventListener("click", () => this.#copy());
    root.querySelector(".view-download").addEventListener("click", () => this.#download());
    root.querySelector(".search-form").addEventListener("submit", (event) => {
      event.preventDefault();
      this.#find(false);
    });
    root.querySelector(".search-previous").addEventListener("click", () => this.#find(true));
    this.searchText.addEventListener("input", () => {
      this.view.terminal?.clearSearch();
      this.searchStatus.textContent = "";
      delete this.searchStatus.dataset.count;
    });
  }

  attach(terminal) {
    terminal.onSearchResults(({ index, count }) => {
      this.searchStatus.dataset.count = String(count);
      this.searchStatus.textContent = count === 0 ? "no match" : `${index + 1} of ${count}`;
    });
  }

  #find(backwards) {
    const query = this.searchText.value;
    if (!query || !this.view.terminal) return;
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
