// Editing the rules (admins only): the rules as a table of inputs — match, approval, order —
// the default, what critical patterns and unreadable commands get, and the env name globs
// denied or prompted (one per line), and the files rules as JSON; Save replaces the policy with `PUT /v1/policy`, which validates the whole
// document (a refused one changes nothing and its message is shown).

import { api } from "./api.js";
import { byId, el, showError } from "./dom.js";

const APPROVALS = ["allow", "prompt", "deny"];

// One glob per line; blank lines dropped. The server checks each (a 422 shows why).
function globs(text) {
  return text.split("\n").map((line) => line.trim()).filter(Boolean);
}

export class PolicyEditor {
  constructor({ onSaved }) {
    this.onSaved = onSaved;
    this.form = byId("policy-editor");
    this.rows = byId("policy-edit-rows");
    this.defaultSelect = byId("policy-default");
    this.criticalSelect = byId("policy-critical");
    this.unreadableSelect = byId("policy-unreadable");
    this.envDeny = byId("policy-env-deny");
    this.envPrompt = byId("policy-env-prompt");
    this.filesJson = byId("policy-files-json");
    this.errorEl = byId("policy-save-error");
    this.editButton = byId("edit-policy");
    this.readOnlyTable = byId("policy-rules-table");
    this.document = null;

    this.editButton.addEventListener("click", () => this.begin());
    byId("policy-add-rule").addEventListener("click", () => {
      this.rows.append(this.#row({ match: "", approval: "prompt" }));
      this.#renumber();
      this.rows.lastElementChild.querySelector("input").focus();
    });
    byId("policy-discard").addEventListener("click", () => this.end());
    this.form.addEventListener("submit", (event) => {
      event.preventDefault();
      this.#save();
    });
  }

  allow(canEdit) {
    this.editButton.hidden = !canEdit;
    if (!canEdit) this.end();
  }

  // The document in force: what an edit starts from (fields the editor does not show are kept).
  // Until it has arrived there is nothing to edit, so the button stays disabled: a click before
  // the policy loaded must not be swallowed silently.
  setDocument(document) {
    this.document = document;
    if (this.form.hidden) this.editButton.disabled = !document;
  }

  begin() {
    if (!this.document) return;
    showError(this.errorEl, null);
    this.defaultSelect.value = this.document.default;
    this.criticalSelect.value = this.document.critical;
    this.unreadableSelect.value = this.document.unreadable;
    const env = this.document.env ?? { deny: [], prompt: [] };
    this.envDeny.value = env.deny.join("\n");
    this.envPrompt.value = env.prompt.join("\n");
    this.filesJson.value = JSON.stringify(this.document.files, null, 2);
    this.rows.replaceChildren(...this.document.rules.map((rule) => this.#row(rule)));
    this.#renumber();
    this.form.hidden = false;
    this.readOnlyTable.hidden = true;
    this.editButton.disabled = true;
  }

  end() {
    this.form.hidden = true;
    this.readOnlyTable.hidden = false;
    this.editButton.disabled = !this.document;
    this.rows.replaceChildren();
  }

  #row(rule) {
    const row = el("tr", { class: "edit-rule" });
    row.rule = rule; // fields of a rule the table does not show are kept as they were
    const move = (delta) => {
      const sibling = delta < 0 ? row.previousElementSibling : row.nextElementSibling;
      if (!sibling) return;
      if (delta < 0) sibling.before(row);
      else sibling.after(row);
      this.#renumber();
    };
    const select = el(
      "select",
      { class: "rule-approval", "aria-label": "Approval" },
      APPROVALS.map((approval) => el("option", { value: approval }, approval)),
    );
    select.value = rule.approval;
    row.append(
      el("td", { class: "rule-number" }),
      el(
        "td",
        {},
        el("input", {
          class: "rule-match",
          type: "text",
          value: rule.match,
          "aria-label": "Match",
          spellcheck: "false",
          autocomplete: "off",
          required: true,
        }),
      ),
      el("td", {}, select),
      el(
        "td",
        { class: "rule-order" },
        el("button", { type: "button", "aria-label": "Move up", onclick: () => move(-1) }, "↑"),
        el("button", { type: "button", "aria-label": "Move down", onclick: () => move(1) }, "↓"),
        el(
          "button",
          {
            type: "button",
            "aria-label": "Remove rule",
            onclick: () => {
              row.remove();
              this.#renumber();
            },
          },
          "✕",
        ),
      ),
    );
    return row;
  }

  #renumber() {
    [...this.rows.children].forEach((row, index) => {
      row.querySelector(".rule-number").textContent = String(index + 1);
    });
  }

  async #save() {
    showError(this.errorEl, null);
    const rules = [...this.rows.children].map((row) => ({
      ...row.rule,
      match: row.querySelector(".rule-match").value,
      approval: row.querySelector(".rule-approval").value,
    }));
    let files;
    try {
      files = JSON.parse(this.filesJson.value);
    } catch (error) {
      showError(this.errorEl, new Error(`Files rules: not JSON (${error.message})`));
      return;
    }
    const button = this.form.querySelector("button[type=submit]");
    button.disabled = true;
    try {
      // The remembered rules are not edited here, and approvers add to them while an edit is
      // open (approve and remember): send the ones in force now, not those read when the edit
      // began, so that saving the rules never drops a decision remembered meanwhile.
      const { remembered } = await api("v1/policy");
      const saved = await api("v1/policy", {
        method: "PUT",
        body: {
          ...this.document,
          remembered,
          default: this.defaultSelect.value,
          critical: this.criticalSelect.value,
          unreadable: this.unreadableSelect.value,
          env: { deny: globs(this.envDeny.value), prompt: globs(this.envPrompt.value) },
          files,
          rules,
        },
      });
      this.end();
      this.onSaved(saved);
    } catch (error) {
      showError(this.errorEl, error);
    } finally {
      button.disabled = false;
    }
  }
}
