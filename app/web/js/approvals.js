// The approvals panel: pending approvals kept live by `/v1/approvals/stream`, newest first under
// a count of them, decided with Approve / Deny, an optional reason and a remember choice
// (docs/policy.md#remembered-decisions); decisions move to the history list, which shows the
// rule a remembered approval made.

import { api, backoff, openSocket, refusal } from "./api.js";
import { byId, el, showError, timeEl, visibleText } from "./dom.js";

const HISTORY_LIMIT = 50;
const FIRST_RETRY_MS = 500;
// How long a remembered decision lasts, offered as a short list; the server bounds it too.
const REMEMBER_DURATIONS = [
  ["1 h", 3600],
  ["8 h", 8 * 3600],
  ["24 h", 24 * 3600],
];

function field(label, value) {
  return [el("dt", {}, label), el("dd", { dataset: { field: label } }, value)];
}

// Everything besides the command that decides what runs: each variable on a line of its own,
// values verbatim (a `$(…)` in a value is data, and the approver must see it as such), a
// character that would not show as itself as its escape (dom.js, visibleText).
function envBlock(env) {
  const entries = Object.entries(env ?? {});
  if (entries.length === 0) return el("span", { class: "muted env-none" }, "none");
  return el(
    "pre",
    { class: "env" },
    entries.flatMap(([name, value], index) => [index ? "\n" : "", ...visibleText(`${name}=${value}`)]),
  );
}

// A network setting as words: "on", "off", or the host globs one per line.
function networkView(network, none) {
  if (network === null || network === undefined) return el("span", { class: "muted" }, none);
  if (Array.isArray(network)) return pathList(network, none);
  const words = { on: "on (the host's network)", off: "off (loopback only)" };
  return el("span", {}, words[network] ?? visibleText(String(network)));
}

function pathList(paths, empty) {
  if (!paths || paths.length === 0) return el("span", { class: "muted" }, empty);
  return el(
    "pre",
    { class: "paths" },
    paths.flatMap((path, index) => [index ? "\n" : "", ...visibleText(path)]),
  );
}

// What an approval waits on, in words: an execution is the usual subject and goes unlabelled;
// a file operation or a session to be made is named, since approving it runs no command.
const SUBJECT_LABELS = { file_operation: "file operation", session: "new session" };

function subjectLabel(approval) {
  const label = SUBJECT_LABELS[approval.subject];
  return label ? el("span", { class: "subject", dataset: { subject: approval.subject } }, label) : [];
}

// A `kind: sandbox` approval: what the request asks beyond the profile, in the caller's words
// why, and the profile it goes beyond — all of it text the caller chose, so escaped as such.
function sandboxBlock(request) {
  const justification = request.justification
    ? el("pre", { class: "justification" }, visibleText(request.justification))
    : el("span", { class: "muted" }, "none given");
  return el(
    "section",
    { class: "sandbox-request", "aria-label": "Sandbox request" },
    el("h3", {}, "Asks for more than its sandbox"),
    el(
      "dl",
      {},
      field("write beyond", pathList(request.write, "nothing more")),
      field("network beyond", networkView(request.network, "nothing more")),
      field("justification", justification),
      field("profile writes", pathList(request.profile.write, "nothing")),
      field("profile network", networkView(request.profile.network, "the server's default")),
    ),
  );
}

export class ApprovalsPanel {
  constructor({ onOpenExecution, onDecided }) {
    this.onOpenExecution = onOpenExecution;
    this.onDecided = onDecided;
    this.pendingList = byId("pending-list");
    this.pendingEmpty = byId("pending-empty");
    this.pendingCount = byId("pending-count");
    this.historyList = byId("history-list");
    this.liveBadge = byId("approvals-live");
    this.errorEl = byId("approvals-error");
    this.pending = new Map();
    this.canDecide = true;
    this.canRememberForAll = false;
    // Remembered rules by id (GET /v1/policy `remembered`), to say what a history entry made.
    this.rules = new Map();
    this.history = [];
    this.socket = null;
    this.stopped = true;
    this.retryMs = FIRST_RETRY_MS;
    this.retryTimer = null;
    this.snapshots = 0;
  }

  // `canDecide`: an approver or admin; an agent sees its own approvals but cannot decide them
  // (the server answers 403), so its cards offer no Approve / Deny. `canRememberForAll`: an
  // admin, the only role the server lets remember a decision for everyone.
  async start({ canDecide = true, canRememberForAll = false } = {}) {
    this.canDecide = canDecide;
    this.canRememberForAll = canRememberForAll;
    this.stopped = false;
    this.snapshots = 0;
    this.#setLive("connecting", "connecting…");
    await this.#readAll();
    this.#connect();
  }

  // The socket's snapshot brings only the pending ones; this read fills the history too.
  async #readAll() {
    try {
      const [{ data }] = await Promise.all([api("v1/approvals?limit=100"), this.#readRules()]);
      this.history = data
        .filter((approval) => approval.state !== "pending")
        .sort((a, b) => String(b.decided_at).localeCompare(String(a.decided_at)))
        .slice(0, HISTORY_LIMIT);
      this.#renderHistory();
      if (!this.socket) this.#replacePending(data.filter((approval) => approval.state === "pending"));
    } catch (error) {
      showError(this.errorEl, error);
    }
  }

  // A failure here only costs the history its rule details (it still shows the rule's id).
  async #readRules() {
    try {
      const { remembered } = await api("v1/policy");
      for (const rule of remembered ?? []) this.rules.set(rule.id, rule);
    } catch {
      // The id alone is shown.
    }
  }

  stop() {
    this.stopped = true;
    this.rules.clear();
    clearTimeout(this.retryTimer);
    this.socket?.close(1000);
    this.socket = null;
    this.#replacePending([]);
    this.history = [];
    this.#renderHistory();
  }

  async #connect() {
    if (this.stopped) return;
    let socket;
    try {
      socket = await openSocket("v1/approvals/stream");
    } catch (error) {
      if (error.status === 401 || error.status === 403) {
        this.#setLive("off", "not live");
        showError(this.errorEl, error);
      } else {
        this.#retry();
      }
      return;
    }
    if (this.stopped) {
      socket.close(1000);
      return;
    }
    this.socket = socket;
    socket.addEventListener("message", (event) => {
      if (this.socket === socket) this.#handle(JSON.parse(event.data));
    });
    socket.addEventListener("close", (event) => {
      // A socket replaced by sign-out and sign-in again must not start a second reconnect loop.
      if (this.socket !== socket) return;
      this.socket = null;
      if (this.stopped) return;
      const refused = refusal(event);
      if (refused) {
        this.#setLive("off", "not live");
        showError(this.errorEl, new Error(refused));
        return;
      }
      this.#retry();
    });
  }

  #retry() {
    if (this.stopped) return;
    this.#setLive("reconnecting", "reconnecting…");
    this.retryTimer = setTimeout(() => this.#connect(), this.retryMs);
    this.retryMs = backoff(this.retryMs);
  }

  #handle(frame) {
    switch (frame.type) {
      case "snapshot":
        // Decisions made while the socket was down came as no event: read the history again.
        if (this.snapshots++ > 0) this.#readAll();
        this.retryMs = FIRST_RETRY_MS;
        showError(this.errorEl, null);
        this.#replacePending(frame.approvals.filter((approval) => approval.state === "pending"));
        this.#setLive("live", "live");
        break;
      case "approval.requested":
        if (frame.approval.state === "pending") this.#addPending(frame.approval);
        this.#renderCount();
        break;
      case "approval.decided":
        this.#decided(frame.approval);
        break;
      default:
        break; // "ping" and anything newer than this console
    }
  }

  #setLive(status, label) {
    this.liveBadge.dataset.live = status;
    this.liveBadge.textContent = label;
  }

  // Cards are added and removed one by one, never rebuilt, so a reason being typed survives
  // other approvals arriving.
  #replacePending(approvals) {
    const wanted = new Set(approvals.map((approval) => approval.id));
    for (const id of [...this.pending.keys()]) if (!wanted.has(id)) this.#removePending(id);
    for (const approval of approvals) this.#addPending(approval);
    this.#renderCount();
  }

  #addPending(approval) {
    if (this.pending.has(approval.id)) return;
    const card = this.#pendingCard(approval);
    this.pending.set(approval.id, { approval, card });
    // Newest first: a card that arrives lands at the top, where it is seen, not below the fold.
    const older = [...this.pendingList.children].find(
      (other) => this.pending.get(other.dataset.approvalId)?.approval.created_at < approval.created_at,
    );
    this.pendingList.insertBefore(card, older ?? null);
  }

  #removePending(id) {
    this.pending.get(id)?.card.remove();
    this.pending.delete(id);
  }

  #decided(approval) {
    this.#removePending(approval.id);
    if (!this.history.some((seen) => seen.id === approval.id)) {
      this.history.unshift(approval);
      this.history.length = Math.min(this.history.length, HISTORY_LIMIT);
    }
    this.#renderCount();
    this.#renderHistory();
    // A rule another approver just made is not known yet: read it, then show it.
    const rule = approval.remembered_rule;
    if (rule && !this.rules.has(rule)) this.#readRules().then(() => this.#renderHistory());
    this.onDecided(approval);
  }

  async #decide(approval, approve, reason, card, remember = null) {
    for (const button of card.querySelectorAll("button")) button.disabled = true;
    const errorEl = card.querySelector(".error");
    const body = reason ? { reason } : {};
    if (approve && remember) body.remember = remember;
    try {
      const decided = await api(
        `v1/approvals/${encodeURIComponent(approval.id)}/${approve ? "approve" : "deny"}`,
        { method: "POST", body },
      );
      if (decided.remembered_rule) await this.#readRules();
      this.#decided(decided);
    } catch (error) {
      showError(errorEl, error);
      for (const button of card.querySelectorAll("button")) button.disabled = false;
      if (error.status === 409) {
        // Someone else decided first; the current record tells how.
        api(`v1/approvals/${encodeURIComponent(approval.id)}`)
          .then((current) => current.state !== "pending" && this.#decided(current))
          .catch(() => {});
      }
    }
  }

  #renderCount() {
    this.pendingEmpty.hidden = this.pending.size > 0;
    this.pendingCount.textContent = String(this.pending.size);
    this.pendingCount.dataset.count = String(this.pending.size);
  }

  #renderHistory() {
    this.historyList.replaceChildren(...this.history.map((approval) => this.#historyCard(approval)));
  }

  #pendingCard(approval) {
    const reasonId = `decision-reason-${approval.id}`;
    const reasonInput = el("input", {
      id: reasonId,
      type: "text",
      class: "decision-reason",
      autocomplete: "off",
      placeholder: "Reason (optional)",
    });
    const card = el("li", { class: "card pending", dataset: { approvalId: approval.id } });
    const remembering = this.canDecide ? this.#rememberChoice(approval) : null;
    const decide = (approve) => (event) => {
      event.preventDefault();
      this.#decide(approval, approve, reasonInput.value.trim(), card, remembering?.value() ?? null);
    };
    // A `file` approval waits on a file operation, a new session's `sandbox` request on the
    // session to be made, not an execution: nothing to open.
    const openButton =
      approval.execution_id == null
        ? []
        : el(
            "button",
            {
              type: "button",
              class: "link",
              onclick: () => this.onOpenExecution(approval.execution_id),
            },
            "View execution",
          );
    const decision = this.canDecide
      ? el(
          "form",
          { class: "decision", onsubmit: decide(true) },
          el("label", { for: reasonId, class: "visually-hidden" }, "Decision reason"),
          reasonInput,
          el("button", { type: "submit", class: "approve" }, "Approve"),
          el("button", { type: "button", class: "deny", onclick: decide(false) }, "Deny"),
          openButton,
          remembering?.node ?? [],
        )
      : el(
          "p",
          { class: "decision waiting" },
          el("span", { class: "muted" }, "Waiting for an approver's decision. "),
          openButton,
        );
    card.dataset.kind = approval.kind ?? "command";
    card.append(
      approval.kind === "sandbox" ? el("span", { class: "kind", dataset: { kind: "sandbox" } }, "sandbox") : [],
      subjectLabel(approval),
      el("pre", { class: "command" }, visibleText(approval.command)),
      approval.kind === "sandbox" && approval.sandbox_request ? sandboxBlock(approval.sandbox_request) : [],
      el(
        "dl",
        {},
        field("cwd", visibleText(approval.cwd)),
        field("env", envBlock(approval.env)),
        field("session", approval.session ?? el("span", { class: "muted" }, "none")),
        field("pty", approval.pty ? "yes (it may read typed input)" : "no"),
        field("reason", approval.reason),
        field("requested by", approval.requested_by),
        field("expires", timeEl(approval.expires_at)),
      ),
      decision,
      el("p", { class: "error", role: "alert" }),
    );
    return card;
  }

  // The remember choice of one card: "this call only" (the default), "remember for <owner>",
  // and for an admin "remember for everyone"; with either remember, the pattern (the server's
  // suggestion, editable) and how long. None for an approval that cannot be remembered (no
  // suggested pattern: a files-API or sandbox approval). `value()` is the request's `remember`.
  #rememberChoice(approval) {
    if (!approval.suggested_pattern) return null;
    const name = `remember-${approval.id}`;
    const option = (value, label, checked = false) =>
      el(
        "label",
        { class: "remember-option" },
        el("input", { type: "radio", name, value, checked }),
        ` ${label}`,
      );
    const patternInput = el("input", {
      type: "text",
      class: "remember-pattern",
      autocomplete: "off",
      spellcheck: "false",
      "aria-label": "Remembered pattern",
    });
    patternInput.value = approval.suggested_pattern;
    const durationSelect = el(
      "select",
      { class: "remember-for", "aria-label": "Remember for how long" },
      REMEMBER_DURATIONS.map(([label, seconds]) => el("option", { value: seconds }, label)),
    );
    const details = el("span", { class: "remember-details" }, patternInput, durationSelect);
    const node = el(
      "fieldset",
      { class: "remember" },
      el("legend", { class: "visually-hidden" }, "Remember"),
      option("once", "this call only", true),
      option("owner", `remember for ${approval.requested_by}`),
      this.canRememberForAll ? option("all", "remember for everyone") : [],
      details,
    );
    const scope = () => node.querySelector("input[type=radio]:checked")?.value ?? "once";
    const showDetails = () => {
      const remembering = scope() !== "once";
      patternInput.disabled = !remembering;
      durationSelect.disabled = !remembering;
      details.hidden = !remembering;
    };
    node.addEventListener("change", showDetails);
    showDetails();
    return {
      node,
      value: () =>
        scope() === "once"
          ? null
          : {
              pattern: patternInput.value.trim() || approval.suggested_pattern,
              scope: scope(),
              for_seconds: Number(durationSelect.value),
            },
    };
  }

  // What a remembered approval made: its rule's pattern, for whom and until when (the id alone
  // when the rule is no longer in the policy, e.g. expired).
  #rememberedField(approval) {
    const id = approval.remembered_rule;
    if (!id) return [];
    const rule = this.rules.get(id);
    const text = rule
      ? el(
          "span",
          {},
          `${id}: `,
          el("code", {}, visibleText(rule.match)),
          ` for ${rule.owner ?? "everyone"} until `,
          timeEl(rule.expires_at),
        )
      : id;
    return field("remembered", text);
  }

  #historyCard(approval) {
    return el(
      "li",
      { class: "card decided", dataset: { approvalId: approval.id, state: approval.state } },
      el("span", { class: "state", dataset: { state: approval.state } }, approval.state),
      subjectLabel(approval),
      el("pre", { class: "command" }, visibleText(approval.command)),
      el(
        "dl",
        {},
        field("by", approval.decided_by ?? "—"),
        approval.decision_reason ? field("why", approval.decision_reason) : [],
        field("at", timeEl(approval.decided_at)),
        this.#rememberedField(approval),
      ),
      approval.execution_id == null
        ? []
        : el(
            "button",
            { type: "button", class: "link", onclick: () => this.onOpenExecution(approval.execution_id) },
            "View execution",
          ),
    );
  }
}
