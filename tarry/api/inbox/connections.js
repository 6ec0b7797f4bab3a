// The inbox's Connections page (`#/connections`): the accounts a person connected for tools
// that act as them (`GET /v1/connections`: their own; an admin's: everyone's), each with its
// server, scopes and when it was made and refreshed (never a token), and a Revoke button
// (`DELETE /v1/connections/{server}?person=`). It stands on inbox.js, loaded after it:
// `$`, `el`, `api` and `show`.
"use strict";

let connectionGeneration = 0;

async function showConnections() {
  show("connections");
  const generation = ++connectionGeneration;
  connectionNotice("");
  try {
    const { connections } = await api("GET", "/v1/connections");
    if (generation !== connectionGeneration) return;
    $("connection-list").replaceChildren(...connections.map(connectionRow));
    $("connection-table").hidden = connections.length === 0;
    $("connection-empty").hidden = connections.length > 0;
  } catch (error) {
    connectionNotice(error.message);
  }
}

function connectionNotice(text) {
  $("connection-notice").textContent = text;
  $("connection-notice").hidden = !text;
}

function when(iso) {
  return iso ? new Date(iso).toLocaleString() : "never";
}

function connectionRow(connection) {
  const row = el("tr", "connection");
  row.dataset.person = connection.person;
  row.dataset.server = connection.server;
  const scopes = connection.scopes.length ? connection.scopes.join(" ") : "(not said)";
  const cells = [connection.person, connection.server, scopes, when(connection.connected_at), when(connection.refreshed_at)];
  const names = ["person", "server", "scopes", "connected", "refreshed"];
  cells.forEach((text, n) => row.append(el("td", `connection-${names[n]}`, text)));
  const revoke = el("button", "danger connection-revoke", "Revoke");
  revoke.type = "button";
  revoke.addEventListener("click", () => {
    const whose = `${connection.person}'s connection to ${connection.server}`;
    if (confirm(`Revoke ${whose}? No call uses it again.`)) revokeConnection(connection, revoke);
  });
  const actions = el("td");
  actions.append(revoke);
  row.append(actions);
  return row;
}

async function revokeConnection(connection, button) {
  button.disabled = true;
  const query = new URLSearchParams({ person: connection.person });
  try {
    await api("DELETE", `/v1/connections/${encodeURIComponent(connection.server)}?${query}`);
    await showConnections();
  } catch (error) {
    connectionNotice(error.message);
    button.disabled = false;
  }
}
