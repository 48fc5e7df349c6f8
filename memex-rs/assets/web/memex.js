// Memex's web pages: the few things a page cannot do without a script. Everything shown is
// rendered (and escaped) by the server; this only asks for fresh HTML fragments.
"use strict";

// "/" focuses the search box (or goes to the search page).
document.addEventListener("keydown", (e) => {
  if (e.key !== "/" || e.ctrlKey || e.metaKey || e.altKey) return;
  const t = e.target;
  if (t instanceof HTMLInputElement || t instanceof HTMLTextAreaElement || t instanceof HTMLSelectElement) return;
  const q = document.getElementById("q");
  e.preventDefault();
  if (q) {
    q.focus();
    q.select();
  } else {
    window.location.href = "/";
  }
});

// Search as you type; arrows move through the results, Enter opens one.
(() => {
  const form = document.getElementById("search-form");
  if (!form) return;
  let timer = 0;
  let seq = 0;
  // A request typed over is abandoned: its answer would only be thrown away.
  let inflight = null;
  const links = () => Array.from(document.querySelectorAll("#result-list a.result"));
  // The arrows move the focus itself (a screen reader reads the result focused; Enter on it
  // opens it as on any link); up from the first result goes back to the box.
  const select = (i) => {
    const all = links();
    if (all.length === 0) return;
    if (i < 0) {
      document.getElementById("q")?.focus();
      return;
    }
    const a = all[Math.min(i, all.length - 1)];
    a.focus();
    a.scrollIntoView({ block: "nearest" });
  };
  const refresh = async () => {
    const params = new URLSearchParams(new FormData(form));
    for (const [k, v] of Array.from(params.entries())) if (!v) params.delete(k);
    const mine = ++seq;
    inflight?.abort();
    inflight = new AbortController();
    try {
      const res = await fetch("/search?" + params.toString(), {
        headers: { Accept: "text/html" },
        signal: inflight.signal,
      });
      if (mine !== seq || !res.ok) return;
      const html = await res.text();
      const doc = new DOMParser().parseFromString(html, "text/html");
      const fresh = doc.getElementById("results");
      const old = document.getElementById("results");
      if (fresh && old) old.replaceWith(document.importNode(fresh, true));
      // Announced once, in few words (the list itself is not read out on each keystroke).
      const status = document.getElementById("results-status");
      if (status) status.textContent = fresh?.querySelector("[data-status]")?.textContent ?? "";
      history.replaceState(null, "", params.toString() ? "/?" + params.toString() : "/");
    } catch (_) {
      // Cancelled by the next keystroke, or the service went away: the form still works
      // without the script.
    }
  };
  form.addEventListener("input", () => {
    clearTimeout(timer);
    timer = setTimeout(refresh, 150);
  });
  // From the box and the results only: in a select the arrows choose an option.
  document.addEventListener("keydown", (e) => {
    if (e.isComposing) return; // an input method is choosing characters
    const t = e.target;
    const inList = t instanceof HTMLAnchorElement && t.closest("#result-list");
    if (!(t instanceof HTMLElement) || (t.id !== "q" && !inList)) return;
    if (e.key === "ArrowDown") {
      e.preventDefault();
      select(inList ? links().indexOf(t) + 1 : 0);
    } else if (e.key === "ArrowUp" && inList) {
      e.preventDefault();
      select(links().indexOf(t) - 1);
    }
  });
})();

// Live pages: when the service stores new messages of what this page shows, fetch its live
// part again. Only a visible tab listens (a browser opens 6 connections per host, and each
// stream holds one); a tab shown again fetches once, for what it missed while hidden.
(() => {
  const live = document.querySelector("[data-live][data-events]");
  if (!live || !window.EventSource) return;
  const url = new URL(window.location.href);
  url.searchParams.set("fragment", "1");
  url.hash = "";
  let busy = false;
  let again = false;
  let source = null;
  const update = async () => {
    // One fetch at a time; a change that comes meanwhile is fetched right after.
    if (busy) {
      again = true;
      return;
    }
    busy = true;
    again = false;
    try {
      const res = await fetch(url.toString(), { headers: { Accept: "text/html" } });
      if (!res.ok) return;
      const doc = new DOMParser().parseFromString(await res.text(), "text/html");
      const fresh = doc.getElementById(live.id);
      const current = document.getElementById(live.id);
      if (!fresh || !current) return;
      if (fresh.dataset.live === current.dataset.live && live.id !== "dashboard-live") return;
      // Keep what the reader opened: a block is known by its talk and its place in the talk,
      // which the talk's growing (or a talk added after it) does not change.
      const keyed = (root, each) => {
        const seen = new Map();
        root.querySelectorAll("details").forEach((d) => {
          const talk = d.closest("section[id]")?.id ?? "";
          const n = seen.get(talk) ?? 0;
          seen.set(talk, n + 1);
          each(d, talk + ":" + n);
        });
      };
      const open = new Set();
      keyed(current, (d, k) => d.open && open.add(k));
      const node = document.importNode(fresh, true);
      keyed(node, (d, k) => {
        if (open.has(k)) d.open = true;
      });
      current.replaceWith(node);
    } catch (_) {
      // The service went away; the stream reconnects by itself.
    } finally {
      busy = false;
      if (again) update();
    }
  };
  const listen = () => {
    if (source) return;
    source = new EventSource(live.dataset.events);
    source.addEventListener("ingest", update);
    // Connected again after the service restarted: what changed meanwhile was not announced.
    let opened = false;
    source.addEventListener("open", () => {
      if (opened) update();
      opened = true;
    });
    // Refused (the service holds too many live pages) or gone for good: the browser does not
    // retry that by itself; try again in a while, and catch up then.
    source.addEventListener("error", () => {
      if (source && source.readyState === EventSource.CLOSED) {
        source = null;
        setTimeout(() => {
          if (!document.hidden && !source) {
            listen();
            update();
          }
        }, 30000);
      }
    });
  };
  document.addEventListener("visibilitychange", () => {
    if (document.hidden) {
      source?.close();
      source = null;
    } else if (!source) {
      listen();
      update();
    }
  });
  if (!document.hidden) listen();
})();

// Sign in: the token goes to the service as JSON (which no other site can send), and comes
// back as a cookie only this site's pages send.
(() => {
  const form = document.getElementById("login-form");
  if (!form) return;
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const token = document.getElementById("token").value;
    const res = await fetch("/login", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ token }),
    });
    if (res.ok) {
      window.location.href = "/";
    } else {
      const body = await res.json().catch(() => null);
      document.getElementById("login-error").textContent =
        res.status === 429 && body ? body.error.message : "That is not this service's token.";
    }
  });
})();
