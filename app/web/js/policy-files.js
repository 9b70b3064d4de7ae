// The policy's `files` rules on the policy page (docs/policy.md#files): the workspace and
// outside defaults, the rules as a table, and a dry run that asks `GET /v1/files/check` what a
// read or a write of one path would meet. Nothing is read or written.

import { api } from "./api.js";
import { byId, el, showError } from "./dom.js";

function verdictTag(verdict, id) {
  return el("span", { id, class: "verdict", dataset: { verdict } }, verdict);
}

function row(label, value) {
  return [el("dt", {}, label), el("dd", { dataset: { field: label } }, value)];
}

export class FilePolicy {
  constructor() {
    this.summary = byId("policy-files-summary");
    this.rulesBody = byId("policy-files");
    this.rulesEmpty = byId("policy-files-empty");
    this.form = byId("file-check-form");
    this.path = byId("file-check-path");
    this.access = byId("file-check-access");
    this.result = byId("file-check-result");
    this.formError = byId("file-check-error");
    this.form.addEventListener("submit", (event) => {
      event.preventDefault();
      this.#check();
    });
  }

  render(files) {
    const policy = files ?? { workspace: "allow", outside: "prompt", rules: [] };
    this.summary.replaceChildren(
      ...[
        ["workspace", policy.workspace],
        ["outside", policy.outside],
      ].map(([label, value]) =>
        el("span", { class: "fact", dataset: { fact: label } }, `${label}: `, el("b", {}, value)),
      ),
    );
    const rules = policy.rules ?? [];
    this.rulesBody.replaceChildren(
      ...rules.map((rule, index) =>
        el(
          "tr",
          { dataset: { approval: rule.approval } },
          el("td", {}, String(index + 1)),
          el("td", {}, el("code", {}, rule.match)),
          el("td", {}, rule.access ?? "any"),
          el("td", {}, verdictTag(rule.approval)),
        ),
      ),
    );
    this.rulesEmpty.hidden = rules.length > 0;
  }

  clear() {
    this.summary.replaceChildren();
    this.rulesBody.replaceChildren();
    this.result.replaceChildren();
    this.result.hidden = true;
  }

  async #check() {
    showError(this.formError, null);
    const query = new URLSearchParams({ path: this.path.value, access: this.access.value });
    const button = this.form.querySelector("button[type=submit]");
    button.disabled = true;
    try {
      this.#showResult(await api(`v1/files/check?${query}`));
    } catch (error) {
      this.result.hidden = true;
      showError(this.formError, error);
    } finally {
      button.disabled = false;
    }
  }

  #showResult(check) {
    const rule = check.rule;
    const none = (text) => el("span", { class: "muted" }, text);
    this.result.replaceChildren(
      el(
        "p",
        { class: "verdict-line" },
        verdictTag(check.verdict, "file-check-verdict"),
        " ",
        el("span", { id: "file-check-reason" }, check.reason),
      ),
      el(
        "dl",
        {},
        row(
          "rule",
          rule
            ? el("code", {}, `${rule.match} (${rule.access ?? "any"}) → ${rule.approval}`)
            : none("no rule: a default decided"),
        ),
        row("path", check.path),
        row("resolved", check.resolved_path),
        row("judged", check.judged_path),
      ),
    );
    this.result.hidden = false;
  }
}
