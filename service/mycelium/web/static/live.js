// Mycelium's web app: the one script. Every page works without it; with it, a room or task page
// follows the room's stream (server-sent events) and swaps in its freshly rendered parts, forms post
// without leaving the page, the composer completes @members and [[memories, and keys are shortcuts.
"use strict";
(function () {
  const body = document.body;
  const room = body.dataset.room;
  const partsUrl = body.dataset.parts;
  const liveState = document.querySelector("[data-live-state]");

  // -- live parts -------------------------------------------------------------------------------
  // What an event may have changed: a notice (a filing, a claim, a settlement) or a presence may
  // move the board, the row and the members, and so may a member the rail does not know yet; any
  // other message only changes what is said (the timeline, a thread and its flow), re-read alone.
  // (A floor that moved shows in a thread and its flow panel, and on a room's board and rail: on a
  // page with neither, it is what was said.)
  let refreshing = false, again = false, timer = null, wanted = null;
  function schedule(what) {
    wanted = wanted === "all" || what === "all" ? "all" : "talk";
    if (!refreshing) { clearTimeout(timer); timer = setTimeout(refresh, 0); }
    else again = true;
  }
  function changed(m) {
    if (!m || m.payload_type === "presence") return "all";
    if (m.payload_type === "notice") {
      const floor = m.payload && m.payload.subkind === "floor";
      return floor && !document.querySelector('[data-part="board"], [data-part="members"]') ? "talk" : "all";
    }
    const rail = document.querySelectorAll("[data-handle]");
    if (rail.length && m.sender_role !== "coordinator"
        && !Array.from(rail).some((el) => el.dataset.handle === m.sender_handle)) return "all";
    return "talk";
  }
  async function refresh() {
    if (!partsUrl || !wanted) return;
    refreshing = true;
    const what = wanted; wanted = null;
    const url = what === "all" ? partsUrl : partsUrl + (partsUrl.includes("?") ? "&" : "?") + "only=talk";
    try {
      const res = await fetch(url, { headers: { Accept: "text/html" } });
      if (res.ok) swap(new DOMParser().parseFromString(await res.text(), "text/html"));
    } catch (e) { /* the stream's reconnect brings the next refresh */ }
    refreshing = false;
    if (again) { again = false; refresh(); }
  }
  function swap(doc) {
    doc.querySelectorAll("[data-part]").forEach((fresh) => {
      const here = document.querySelector(`[data-part="${fresh.dataset.part}"]`);
      if (!here) return;
      const list = here.querySelector(".timeline");
      const atEnd = !list || list.scrollTop + list.clientHeight >= list.scrollHeight - 8;
      here.replaceChildren(...fresh.childNodes);  // (moved from the parsed document: not parsed twice)
      const newList = here.querySelector(".timeline");
      if (newList && atEnd) newList.scrollTop = newList.scrollHeight;
    });
    leases();
  }
  function follow() {
    if (!room || !window.EventSource) return;
    const url = `/api/rooms/${encodeURIComponent(room)}/messages/stream?after=${body.dataset.head || 0}`;
    const source = new EventSource(url);
    let lost = false;
    source.addEventListener("open", () => {
      state("live");
      if (lost) { lost = false; schedule("all"); }  // caught up from the last event: re-read the parts
    });
    source.addEventListener("message", (e) => {
      let m = null;
      try { m = JSON.parse(e.data); } catch (err) { /* refresh everything then */ }
      if (!m || m.payload_type !== "keepalive") schedule(changed(m));
    });
    source.addEventListener("error", () => { lost = true; state("reconnecting…"); });
  }
  function state(text) { if (liveState) liveState.textContent = text; }

  // -- lease countdowns ------------------------------------------------------------------------
  function duration(s) {
    if (s <= 0) return "expired";
    if (s < 60) return `${Math.floor(s)}s`;
    const m = Math.floor(s / 60), h = Math.floor(m / 60);
    return h ? `${h}h ${String(m % 60).padStart(2, "0")}m` : `${m}m`;
  }
  function leases() {
    const now = Date.now();
    document.querySelectorAll("[data-left]").forEach((el) => {
      if (!el.dataset.seen) el.dataset.seen = String(now);
      const left = Number(el.dataset.left) - (now - Number(el.dataset.seen)) / 1000;
      el.textContent = left > 0 ? `${duration(left)} left` : "lease expired";
    });
  }
  setInterval(leases, 1000);

  // -- forms without leaving the page -----------------------------------------------------------
  const HANDLE = "mycelium.handle";
  function rememberHandle(form) {
    const h = form.querySelector("input[name=handle]");
    if (h && h.value.trim()) localStorage.setItem(HANDLE, h.value.trim());
  }
  document.querySelectorAll("input[name=handle]").forEach((input) => {
    if (!input.value) input.value = localStorage.getItem(HANDLE) || "";
  });
  document.querySelectorAll("form[data-composer]").forEach((form) => {
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const error = form.querySelector(".composer-error");
      const button = form.querySelector("button[type=submit]");
      button.disabled = true;
      const area = form.querySelector("textarea");
      const sent = area.value;
      try {
        // (the redirect a landed write answers is not followed: the stream brings the change)
        const res = await fetch(form.action, { method: "POST", redirect: "manual",
                                               body: new URLSearchParams(new FormData(form)) });
        if (res.type === "opaqueredirect" || res.ok) {
          if (area.value.startsWith(sent)) area.value = area.value.slice(sent.length).trimStart();
          error.hidden = true;
          rememberHandle(form);
          schedule("all");
        } else {
          const doc = new DOMParser().parseFromString(await res.text(), "text/html");
          const said = doc.querySelector(".refusal-message");
          error.textContent = said ? said.textContent : `refused (${res.status})`;
          error.hidden = false;
        }
      } catch (e) {
        error.textContent = "the hub did not answer; try again";
        error.hidden = false;
      }
      button.disabled = false;
    });
  });
  document.querySelectorAll("form").forEach((f) => f.addEventListener("submit", () => rememberHandle(f)));

  // -- the composer's sigils: @ members, [[ memories --------------------------------------------
  let memoryKeys = null;
  async function keys() {
    if (memoryKeys === null && room) {
      memoryKeys = [];
      try {
        const res = await fetch(`/api/rooms/${encodeURIComponent(room)}/memory?limit=1000`);
        if (res.ok) memoryKeys = (await res.json()).map((m) => m.key);
      } catch (e) { /* no completion then */ }
    }
    return memoryKeys || [];
  }
  const COMMANDS = [
    { name: "claim", label: "/claim — take the row's lease", insert: "/claim" },
    { name: "release", label: "/release [note] — give the lease back", insert: "/release " },
    { name: "resolve", label: "/resolve — settle the row", insert: "/resolve" },
  ];
  function handles() {
    // the page's list, and the members rail (which the stream keeps fresh)
    const named = document.querySelectorAll("#handles option, [data-handle]");
    return Array.from(new Set(Array.from(named).map((el) => el.value || el.dataset.handle)));
  }
  document.querySelectorAll("textarea[data-sigils]").forEach((area) => {
    const list = document.createElement("ul");
    list.className = "suggest"; list.setAttribute("role", "listbox"); list.hidden = true;
    list.id = `${area.id}-suggest`;
    area.setAttribute("aria-controls", list.id); area.setAttribute("aria-autocomplete", "list");
    area.after(list);
    let token = null, picked = 0;
    function close() { list.hidden = true; list.innerHTML = ""; list._items = null; token = null; }
    function show(items) {
      list.innerHTML = "";
      items.slice(0, 8).forEach((item, i) => {
        const li = document.createElement("li");
        li.textContent = item.label; li.setAttribute("role", "option");
        li.setAttribute("aria-selected", String(i === picked));
        li.addEventListener("mousedown", (e) => { e.preventDefault(); choose(item); });
        list.appendChild(li);
      });
      list.hidden = items.length === 0;
      list._items = items.slice(0, 8);
    }
    function choose(item) {
      const at = area.selectionStart;
      area.value = area.value.slice(0, at - token.length) + item.insert + area.value.slice(at);
      const caret = at - token.length + item.insert.length;
      area.setSelectionRange(caret, caret);
      close(); area.focus();
    }
    area.addEventListener("input", async () => {
      const before = area.value.slice(0, area.selectionStart);
      const mention = before.match(/(?:^|\s)(@[\w.-]*)$/);
      const link = before.match(/(\[\[[^\]\n]*)$/);
      const command = before.match(/^(\/[\w-]*)$/);
      picked = 0;
      if (command) {
        token = command[1];
        const q = token.slice(1).toLowerCase();
        const skills = (await keys()).filter((k) => k.startsWith("skills/"))
          .map((k) => ({ label: `${k.slice(7)} (skill)`, insert: `[[${k}]] `, name: k.slice(7) }));
        show(COMMANDS.concat(skills).filter((c) => c.name.startsWith(q)));
      } else if (mention) {
        token = mention[1];
        const q = token.slice(1).toLowerCase();
        show(handles().filter((h) => h.toLowerCase().startsWith(q)).map((h) => ({ label: `@${h}`, insert: `@${h} ` })));
      } else if (link) {
        token = link[1];
        const q = token.slice(2).toLowerCase();
        const found = (await keys()).filter((k) => k.toLowerCase().includes(q));
        show(found.map((k) => ({ label: k, insert: `[[${k}]] ` })));
      } else close();
    });
    area.addEventListener("keydown", (e) => {
      if (list.hidden || !list._items) return;
      if (e.key === "ArrowDown" || e.key === "ArrowUp") {
        e.preventDefault();
        picked = (picked + (e.key === "ArrowDown" ? 1 : list._items.length - 1)) % list._items.length;
        show(list._items);
      } else if (e.key === "Enter" || e.key === "Tab") { e.preventDefault(); choose(list._items[picked]); }
      else if (e.key === "Escape") close();
    });
    // (a pick by mouse blurs the field first; a blur that focus has come back from closes nothing)
    area.addEventListener("blur", () => setTimeout(() => { if (document.activeElement !== area) close(); }, 150));
  });

  // -- keys ---------------------------------------------------------------------------------------
  const help = document.getElementById("keys-help");
  const helpButton = document.querySelector("[data-keys-help]");
  if (helpButton && help && help.showModal) {
    helpButton.hidden = false;
    helpButton.addEventListener("click", () => help.showModal());
  }
  let pending = "";
  document.addEventListener("keydown", (e) => {
    const t = e.target;
    if (e.key === "Escape" && t.blur && t !== body) { t.blur(); return; }
    if (e.ctrlKey || e.metaKey || e.altKey || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName)) return;
    const key = pending + e.key; pending = "";
    const focus = (sel) => { const el = document.querySelector(sel); if (el) { e.preventDefault(); el.focus(); } };
    if (key === "?" && help && help.showModal) { e.preventDefault(); help.showModal(); }
    else if (key === "/") focus('[data-key="/"]');
    else if (key === "c") focus("textarea[data-sigils]");
    else if (key === "n") focus('[data-key="n"]');
    else if (key === "g") pending = "g";
    else if (key === "gr") location.href = "/";
  });
  document.querySelectorAll("[data-back]").forEach((a) => a.addEventListener("click", (e) => {
    if (history.length > 1) { e.preventDefault(); history.back(); }
  }));

  leases();
  document.querySelectorAll(".timeline").forEach((l) => { l.scrollTop = l.scrollHeight; });
  follow();
})();
