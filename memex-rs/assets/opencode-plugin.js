// Memex memory for OpenCode, written by `memex hooks plugin opencode`. Save it as
// ~/.config/opencode/plugins/memex.js (every project) or .opencode/plugins/memex.js (one).
//
// - Each prompt: `memex inject --mode smart` adds what Memex remembers of this project and this
//   question to the message, as a synthetic part (kept out of titles by OpenCode; archived by
//   Memex as context, not as a prompt).
// - Each session: `memex inject --mode full` is asked once for the project's recent session
//   summaries, which then go into the system prompt of the session's every request
//   (experimental.chat.system.transform; not stored).
// - Each finished turn (session.idle): `memex hook stop` compacts the session.
//
// Sub-agent sessions get nothing. Every call (and the look-up of a session's parent) ends
// within TIMEOUT_MS; on any error, timeout or stopped service nothing is added and OpenCode
// goes on as if Memex were not there.
import { spawn } from "node:child_process";

const MEMEX = process.env.MEMEX_BIN || __MEMEX__;
const TIMEOUT_MS = 3000;

// Runs memex with the hook JSON on stdin; its stdout, or "" on any failure.
function memex(args, payload) {
  return new Promise((resolve) => {
    let out = "";
    let done = false;
    let timer;
    const finish = (value) => {
      if (!done) {
        done = true;
        clearTimeout(timer);
        resolve(value);
      }
    };
    let child;
    try {
      child = spawn(MEMEX, args, { stdio: ["pipe", "pipe", "ignore"] });
    } catch {
      return resolve("");
    }
    timer = setTimeout(() => {
      child.kill("SIGKILL");
      finish("");
    }, TIMEOUT_MS);
    child.on("error", () => finish(""));
    child.stdout.setEncoding("utf8");
    child.stdout.on("data", (d) => {
      out += d;
    });
    child.on("close", (code) => finish(code === 0 ? out : ""));
    child.stdin.on("error", () => {});
    child.stdin.end(JSON.stringify(payload));
  });
}

// The additionalContext of Memex's answer, or "".
function context(stdout) {
  try {
    const text = JSON.parse(stdout)?.hookSpecificOutput?.additionalContext;
    return typeof text === "string" ? text : "";
  } catch {
    return "";
  }
}

// `promise`'s value, or `fallback` after TIMEOUT_MS or on an error.
function within(promise, fallback) {
  let timer;
  const late = new Promise((resolve) => {
    timer = setTimeout(() => resolve(fallback), TIMEOUT_MS);
  });
  return Promise.race([Promise.resolve(promise).catch(() => fallback), late]).finally(() =>
    clearTimeout(timer),
  );
}

export const MemexPlugin = async ({ client, directory }) => {
  const subagent = new Map();
  // Whether a session is a sub-agent's (it has a parent); unknown (no answer in time) counts
  // as no, and is asked again next time.
  const isSubagent = async (id) => {
    if (!subagent.has(id)) {
      const s = await within(client?.session?.get?.({ path: { id } }), undefined);
      if (s === undefined) return false;
      subagent.set(id, Boolean(s?.data?.parentID));
    }
    return subagent.get(id);
  };
  const summaries = new Map();
  return {
    "chat.message": async (input, output) => {
      const id = input.sessionID;
      if (!id || (await isSubagent(id))) return;
      const prompt = (output.parts || [])
        .filter((p) => p.type === "text" && !p.synthetic && typeof p.text === "string")
        .map((p) => p.text)
        .join("\n");
      if (!prompt.trim()) return;
      const text = context(
        await memex(["inject", "--mode", "smart"], {
          session_id: id,
          cwd: directory,
          hook_event_name: "UserPromptSubmit",
          prompt,
        }),
      );
      if (!text) return;
      output.parts.unshift({
        id: `prt_memex${Date.now().toString(36)}`,
        sessionID: id,
        messageID: output.message?.id ?? input.messageID,
        type: "text",
        text,
        synthetic: true,
      });
    },
    "experimental.chat.system.transform": async (input, output) => {
      const id = input.sessionID;
      if (!id || (await isSubagent(id))) return;
      if (!summaries.has(id)) {
        summaries.set(
          id,
          context(
            await memex(["inject", "--mode", "full"], {
              session_id: id,
              cwd: directory,
              hook_event_name: "SessionStart",
              source: "startup",
            }),
          ),
        );
      }
      const text = summaries.get(id);
      if (text) output.system.push(text);
    },
    event: async ({ event }) => {
      if (event?.type !== "session.idle") return;
      const id = event.properties?.sessionID;
      if (!id || (await isSubagent(id))) return;
      await memex(["hook", "stop"], {
        session_id: id,
        cwd: directory,
        hook_event_name: "Stop",
      });
    },
  };
};
