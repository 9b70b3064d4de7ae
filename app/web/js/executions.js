// The executions panel: the list (newest first, refreshed on demand and every few seconds while
// the tab is visible) and the Run form, which starts a background job and is shown only to a
// role that may run one (an approver may not: the server answers 403). A row opens its
// execution in a tab: the command is a link (#/executions/{id}) and a click anywhere on the
// row follows it, so it works at any width.

import { api } from "./api.js";
import { byId, el, showError, timeEl, visibleString, visibleText } from "./dom.js";
import { durationText } from "./execution-view.js";
import { executionHref } from "./router.js";

const REFRESH_MS = 5000;
const PAGE_SIZE = 50;

export class ExecutionsPanel {
  constructor({ onOpenExecution, selectedId, onRefreshed }) {
    // onOpenExecution(id) navigates; selectedId() is the execution whose tab is shown;
    // onRefreshed() follows each read of the list.
    this.onOpenExecution = onOpenExecution;
    this.selectedId = selectedId;
    this.onRefreshed = onRefreshed;
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

  start({ canRun = true } = {}) {
    this.runForm.hidden = !canRun;
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
    this.onRefreshed?.();
  }

  #row(execution) {
    const selected = execution.id === this.selectedId();
    const exit = execution.exit_code ?? (execution.signal != null ? `sig ${execution.signal}` : null);
    const duration = durationText(execution);
    const cell = (label, className, ...content) =>
      el("td", { class: className, dataset: { label } }, ...content);
    return el(
      "tr",
      {
        class: "execution-row",
        dataset: { executionId: execution.id },
        "aria-current": selected ? "true" : null,
        onclick: (event) => {
          // The link itself navigates; a click elsewhere on the row does the same.
          if (!event.target.closest("a")) this.onOpenExecution(execution.id);
        },
      },
      cell("State", "state-cell", el("span", { class: "state", dataset: { state: execution.state } }, execution.state)),
      cell(
        "Command",
        "command-cell",
        el("a", { class: "command", href: executionHref(execution.id), title: visibleString(execution.command) }, visibleText(execution.command)),
        execution.pty ? el("span", { class: "tag" }, "pty") : null,
      ),
      cell("Exit", "exit-cell", exit === null ? el("span", { class: "muted" }, "—") : String(exit)),
      cell("Duration", "duration-cell", duration ?? el("span", { class: "muted" }, "—")),
      cell("Owner", "owner-cell", el("span", { class: "owner", title: execution.owner }, execution.owner)),
      cell("Started", "started-cell", timeEl(execution.started_at ?? execution.created_at, { dated: true })),
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
