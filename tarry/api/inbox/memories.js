// The inbox's Memories page (`#/memories`): the memories agents keep across runs that this
// person may see (`GET /v1/memories`: their own scope's and their groups'; admins all),
// each with where it came from, its text editable (`PATCH`) and deletable (`DELETE`).
// It stands on inbox.js, loaded after it: `$`, `el`, `api` and `show`.
"use strict";

let memoryGeneration = 0;

async function showMemories() {
  show("memories");
  const generation = ++memoryGeneration;
  const query = $("memory-query").value.trim();
  const path = query ? `/v1/memories?q=${encodeURIComponent(query)}` : "/v1/memories";
  memoryNotice("");
  try {
    const { memories } = await api("GET", path);
    if (generation !== memoryGeneration) return;
    $("memory-list").replaceChildren(...memories.map(memoryCard));
    $("memory-empty").hidden = memories.length > 0;
  } catch (error) {
    memoryNotice(error.message);
  }
}

function memoryNotice(text) {
  $("memory-notice").textContent = text;
  $("memory-notice").hidden = !text;
}

// "from run R, turn T, approved by A": the provenance `tarry memory show` gives too.
function provenanceText(memory) {
  const source = memory.provenance;
  const from = source.run_id ? `from run ${source.run_id}, turn ${source.turn}` : "written by a person";
  const approved = source.approved_by ? `approved by ${source.approved_by}` : "nobody was asked";
  const edited = memory.edited_by ? `; edited by ${memory.edited_by}` : "";
  return `${memory.scope} · ${from}, ${approved}${edited}`;
}

function memoryCard(memory) {
  const card = el("li", "memory");
  card.dataset.memoryId = memory.id;
  const text = el("textarea", "memory-text");
  text.value = memory.text;
  text.rows = Math.min(8, memory.text.split("\n").length + 1);
  text.setAttribute("aria-label", "the memory's text (edit to change it)");
  const tags = el("div", "muted small memory-tags", memory.tags.length ? `tags: ${memory.tags.join(", ")}` : "");
  const source = el("div", "muted small memory-provenance", provenanceText(memory));
  const save = el("button", "memory-save", "Save");
  const remove = el("button", "danger memory-delete", "Delete");
  save.type = remove.type = "button";
  save.addEventListener("click", () => changeMemory(card, "PATCH", { text: text.value }));
  remove.addEventListener("click", () => {
    if (confirm("Delete this memory? No run recalls it again.")) changeMemory(card, "DELETE");
  });
  const actions = el("div", "memory-actions");
  actions.append(save, remove);
  card.append(text, tags, source, actions);
  return card;
}

async function changeMemory(card, method, body) {
  for (const button of card.querySelectorAll("button")) button.disabled = true;
  try {
    await api(method, `/v1/memories/${encodeURIComponent(card.dataset.memoryId)}`, body);
    await showMemories();
  } catch (error) {
    memoryNotice(error.message);
    for (const button of card.querySelectorAll("button")) button.disabled = false;
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("memory-search").addEventListener("submit", (event) => {
    event.preventDefault();
    showMemories();
  });
});
