// A long-lived signer for the differential test (tests/test_signer_diff.py): one JSON case a line on stdin,
// { clip, site, keyId, secret, base, variant, expires }, one JSON answer a line on stdout: { link } or { error }.
// Runs under Deno and Node alike; the signer module's URL is its one argument.
import process from "node:process";
import { createInterface } from "node:readline";

const { signLink, LinkError } = await import(process.argv[2]);
const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
for await (const line of lines) {
  const c = JSON.parse(line);
  let answer;
  try {
    const options = { secret: c.secret, base: c.base, variant: c.variant, expires: c.expires };
    if (c.site !== undefined) options.site = c.site;
    if (c.keyId !== undefined) options.keyId = c.keyId;
    answer = { link: await signLink(c.clip, options) };
  } catch (error) {
    if (!(error instanceof LinkError)) answer = { crash: String(error && error.stack || error) };
    else answer = { error: error.message };
  }
  process.stdout.write(JSON.stringify(answer) + "\n");
}
