// The policy panel: the rules in force as a table, the env rules, and a dry-run form that asks
// `POST /v1/policy/evaluate` what a command (with its env and cwd) would meet. Nothing runs.
// The files rules and their own dry run are policy-files.js's.

import { api } from "./api.js";
import { byId, el, showError } from "./dom.js";
import { PolicyEditor } from "./policy-editor.js";
import { FilePolicy } from "./policy-files.js";
import { PolicyHistory } from "./policy-history.js";

const ENV_LINE = /^([^=]*)=(.*)$/s;

// "NAME=value" per line; blank lines are skipped. A line without "=" is an error the user sees.
export function parseEnv(text) {
  const env = {};
  for (const line of text.split("\n")) {
    if (!line.trim()) continue;
    const match = ENV_LINE.exec(line);
    if (!match) throw new Error(`Environment line without "=": ${line}`);
    env[match[1].trim()] = match[2];
  }
  return env;
}

function listOrNone(items, className) {
  if (!items || items.length === 0) return el("span", { class: "muted" }, "none");
  return el("ul", { class: className }, items.map((item) => el("li", {}, el("code", {}, item))));
}

function row(label, value) {
  return [el("dt", {}, label), el("dd", { dataset: { field: label } }, value)];
}

export class PolicyPanel {
  constructor() {
    this.summary = byId("policy-summary");
    this.rulesBody = byId("policy-rules");
    this.rulesEmpty = byId("policy-rules-empty");
    this.envRules = byId("policy-env");
    this.errorEl = byId("policy-error");
    this.form = byId("dry-run-form");
    this.command = byId("dry-run-command");
    this.env = byId("dry-run-env");
    this.cwd = byId("dry-run-cwd");
    this.result = byId("dry-run-result");
    this.formError = byId("dry-run-error");

    this.files = new FilePolicy();
    this.history = new PolicyHistory();
    this.editor = new PolicyEditor({
      onSaved: (document) => {
        this.#render(document);
        this.history.refresh().catch((error) => showError(this.errorEl, error));
      },
    });
    byId("refresh-policy").addEventListener("click", () => this.refresh());
    this.form.addEventListener("submit", (event) => {
      event.preventDefault();
      this.#evaluate();
    });
  }

  start({ canEdit = false } = {}) {
    this.editor.allow(canEdit);
    this.refresh();
  }

  stop() {
    this.editor.allow(false);
    this.editor.setDocument(null); // the next user starts from the policy read for them
    this.rulesBody.replaceChildren();
    this.summary.replaceChildren();
    this.envRules.replaceChildren();
    this.files.clear();
    this.history.clear();
    this.result.replaceChildren();
    this.result.hidden = true;
  }

  async refresh() {
    try {
      this.#render(await api("v1/policy"));
      await this.history.refresh();
      showError(this.errorEl, null);
    } catch (error) {
      showError(this.errorEl, error);
    }
  }

  #render(policy) {
    this.editor.setDocument(policy);
    const facts = [
      ["default", policy.default],
      ["critical", policy.critical],
      ["unreadable", policy.unreadable],
      ["interceptor", policy.interceptor?.enabled ? "on" : "off"],
    ].filter(([, value]) => value !== undefined);
    this.summary.replaceChildren(
      ...facts.map(([label, value]) =>
        el("span", { class: "fact", dataset: { fact: label } }, `${label}: `, el("b", {}, value)),
      ),
    );
    this.rulesBody.replaceChildren(
      ...policy.rules.map((rule, index) =>
        el(
          "tr",
          { dataset: { approval: rule.approval } },
          el("td", {}, String(index + 1)),
          el("td", {}, el("code", {}, rule.match)),
          el("td", {}, verdictTag(rule.approval)),
        ),
      ),
    );
    this.rulesEmpty.hidden = policy.rules.length > 0;
    const env = policy.env ?? { deny: [], prompt: [] };
    this.envRules.replaceChildren(
      ...row("env deny", listOrNone(env.deny, "globs")),
      ...row("env prompt", listOrNone(env.prompt, "globs")),
    );
    this.files.render(policy.files);
  }

  async #evaluate() {
    showError(this.formError, null);
    let env;
    try {
      env = parseEnv(this.env.value);
    } catch (error) {
      showError(this.formError, error);
      return;
    }
    const body = { command: this.command.value };
    if (Object.keys(env).length > 0) body.env = env;
    if (this.cwd.value.trim()) body.cwd = this.cwd.value.trim();
    const button = this.form.querySelector("button[type=submit]");
    button.disabled = true;
    try {
      this.#showResult(await api("v1/policy/evaluate", { method: "POST", body }));
    } catch (error) {
      this.result.hidden = true;
      showError(this.formError, error);
    } finally {
      button.disabled = false;
    }
  }

  #showResult(evaluation) {
    const rule = evaluation.matched_rule;
    const matched = evaluation.matched_segment;
    const none = (text = "—") => el("span", { class: "muted" }, text);
    this.result.replaceChildren(
      el(
        "p",
        { class: "verdict-line" },
        verdictTag(evaluation.verdict, "dry-run-verdict"),
        " ",
        el("span", { id: "dry-run-reason" }, evaluation.reason),
      ),
      el(
        "dl",
        {},
        row("command verdict", verdictTag(evaluation.command_verdict)),
        row("rule", rule ? el("code", {}, `${rule.match} → ${rule.approval}`) : none("no rule")),
        row("matched", matched ? el("code", {}, matched) : none()),
        row("cwd", evaluation.cwd),
        row("segments", listOrNone(evaluation.segments, "segments")),
        row("critical", listOrNone(evaluation.critical_hits, "critical")),
        row("unreadable", listOrNone(evaluation.unreadable_reasons, "unreadable")),
        row("env", evaluation.env.length ? envTable(evaluation.env) : none("none")),
        row("interceptor", interceptionText(evaluation.interception)),
      ),
    );
    this.result.hidden = false;
  }
}

function verdictTag(verdict, id) {
  return el("span", { id, class: "verdict", dataset: { verdict } }, verdict);
}

function envTable(verdicts) {
  const rows = verdicts.map((item) =>
    el(
      "tr",
      { dataset: { name: item.name, verdict: item.verdict } },
      el("td", {}, el("code", {}, item.name)),
      el("td", {}, verdictTag(item.verdict)),
      el("td", { class: "muted" }, item.rule ?? ""),
    ),
  );
  return el("table", { class: "env-verdicts" }, el("tbody", {}, rows));
}

function interceptionText(interception) {
  return interception ? `${interception.tool}: ${interception.message}` : "—";
}
