// OpenCode plugin: the system prompt comes from the pack pack-client serves, through its
// file view. Options: view (the link, <cache>/files/current), prompt (a file in the pack).
import { readFileSync, realpathSync } from "node:fs";

export const PromptPack = async (_ctx, { view, prompt } = {}) => ({
  "experimental.chat.system.transform": async (_input, output) => {
    let text;
    try {
      // Resolved once per request: one pack version, whatever installs meanwhile.
      text = readFileSync(`${realpathSync(view)}/${prompt}`, "utf8");
    } catch {
      return; // no view, or a pack without this file: OpenCode's own prompt
    }
    // OpenCode's own prompt is what comes before its environment block, which stays. A
    // request without one (a title, a summary) keeps OpenCode's prompt for that job.
    const env = output.system[0]?.indexOf("You are powered by the model named") ?? -1;
    if (env >= 0) output.system[0] = `${text}\n${output.system[0].slice(env)}`;
  },
});
