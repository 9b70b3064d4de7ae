// Entry point: sign-in, and the panels wired together.

import { api, forgetToken, session, storeToken, storedToken } from "./js/api.js";
import { ApprovalsPanel } from "./js/approvals.js";
import { byId, showError } from "./js/dom.js";
import { ExecutionView } from "./js/execution-view.js";
import { ExecutionsPanel } from "./js/executions.js";
import { PolicyPanel } from "./js/policy.js";

const signInSection = byId("sign-in");
const signInForm = byId("sign-in-form");
const tokenInput = byId("token-input");
const signInError = byId("sign-in-error");
const workspace = byId("workspace");
const signOutButton = byId("sign-out");
const serverInfo = byId("server-info");

const view = new ExecutionView({ onChanged: () => executions.refresh() });
const executions = new ExecutionsPanel({
  onOpenExecution: (id) => view.open(id),
  selectedId: () => view.executionId,
});
const policy = new PolicyPanel();
const approvals = new ApprovalsPanel({
  onOpenExecution: (id) => view.open(id),
  onDecided: () => executions.refresh(),
});

let signedIn = false;

async function enter() {
  const info = await api("v1/info");
  serverInfo.textContent = `v${info.version} · ${info.running_jobs}/${info.max_jobs} jobs running`;
  signedIn = true;
  signInSection.hidden = true;
  workspace.hidden = false;
  signOutButton.hidden = false;
  approvals.start();
  executions.start();
  policy.start();
}

function leave(message) {
  forgetToken();
  if (signedIn) {
    approvals.stop();
    executions.stop();
    policy.stop();
    view.close();
  }
  signedIn = false;
  workspace.hidden = true;
  signOutButton.hidden = true;
  serverInfo.textContent = "";
  signInSection.hidden = false;
  showError(signInError, message ? new Error(message) : null);
  tokenInput.focus();
}

signInForm.addEventListener("submit", async (event) => {
  event.preventDefault();
  const token = tokenInput.value.trim();
  if (!token) return;
  storeToken(token);
  tokenInput.value = "";
  try {
    await enter();
  } catch (error) {
    leave(error.status === 401 ? "That token was refused." : error.message);
  }
});

signOutButton.addEventListener("click", () => leave(null));

session.addEventListener("unauthenticated", () => {
  if (signedIn) leave("The server refused the token; sign in again.");
});

if (storedToken()) {
  enter().catch((error) => leave(error.message));
} else {
  leave(null);
}
