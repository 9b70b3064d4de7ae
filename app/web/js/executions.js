// The executions panel: the list (newest first, refreshed on demand and every few seconds while
// the tab is visible) and the Run form, which starts a background job.

import { api } from "./api.js";
import { byId, el, showError, timeEl } from "./dom.js";

const REFRESH_MS = 5000;
const PAGE_SIZE = 50;

export class ExecutionsPanel {
  constructor({ onOpenExecution, selectedId }) {
    this.onOpenExecution = onOpenExecution;
    this.selectedId = selectedId;
    this.rows = byId("execution-rows");
    this.errorEl = byId("executions-error");
    this.runForm = byId("run-form");
    this.runCommand = byId("run-command");
    this.runPty = byId("run-pty");
    this.runError = byId("run-error");
    this.timer = null;
    this.refreshing = null;

    byId("refresh-executions").addEventListener("click", () => this.refresh());
    this.runForm.addEventListener("submit", (event) => {
      event.preventDefault();
      this.#run();
    });
  }

  start() {
    this.refresh();
    this.timer = setInterval(() => {
      if (document.visibilityState === "visible") this.refresh();
    }, REFRESH_MS);
  }

  stop() {
    clearInterval(this.timer);
    this.rows.replaceChildren();
  }

  refresh() {
    // One request at a time: a slow server must not pile up overlapping refreshes.
    this.refreshing ??= this.#load().finally(() => {
      this.refreshing = null;
    });
    return this.refreshing;
  }

  async #load() {
    try {
      const { data } = await api(`v1/executions?limit=${PAGE_SIZE}`);
      showError(this.errorEl, null);
      this.rows.replaceChildren(...data.map((execution) => this.#row(execution)));
    } catch (error) {
      showError(this.errorEl, error);
    }
  }

  #row(execution) {
    const selected = execution.id === this.selectedId();
    return el(
      "tr",
      { dataset: { executionId: execution.id }, "aria-current": selected ? "true" : null },
      el("td", {}, el("span", { class: "state", dataset: { state: execution.state } }, execution.state)),
      el(
        "td",
        { class: "command-cell" },
        el(
          "button",
          {
            type: "button",
            class: "link command",
            title: execution.command,
            onclick: () => this.onOpenExecution(execution.id),
          },
          execution.command,
        ),
        execution.pty ? el("span", { class: "tag" }, "pty") : null,
      ),
      el("td", {}, execution.owner),
      el("td", {}, timeEl(execution.started_at ?? execution.created_at)),
    );
  }

  async #run() {
    showError(this.runError, null);
    const button = this.runForm.querySelector("button[type=submit]");
    button.disabled = true;
    try {
      const execution = await api("v1/executions", {
        method: "POST",
        body: { command: this.runCommand.value, pty: this.runPty.checked, async: true },
      });
      this.runCommand.value = "";
      this.refresh();
      this.onOpenExecution(execution.id);
    } catch (error) {
      showError(this.runError, error);
    } finally {
      button.disabled = false;
    }
  }
}
