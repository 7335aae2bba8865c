// The dashboard in a real browser (Debian's chromium, driven headless by
// playwright-core) against a running `tidewater run --http` job:
//   - the jobs page lists the job with its progress bar;
//   - on the job page, progress advances between two readings;
//   - a checkpoint appears in the timeline (a bar drawn, a row in the table);
//   - the cancel button, with its confirmation and the server's token
//     (asked for first: the server says it needs one), stops the job: the page shows
//     CANCELLED, and so does the API;
//   - a failed job's page shows its error code, message and whether a
//     retry helps;
//   - no console error, no failed request, no uncaught exception;
//   - screenshots of the job page at start, mid-run and after cancel (and
//     of the jobs page, and of the job page on a phone-sized screen).
//
//   node dashboard.mjs BASE_URL TOKEN OUT_DIR
import { chromium } from "playwright-core";

const [base, token, out] = process.argv.slice(2);
const problems = [];
const step = (text) => console.log(`dashboard: ${text}`);
const fail = (text) => { throw new Error(text); };

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox"],
});
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  page.on("console", (m) => { if (m.type() === "error") problems.push(`console: ${m.text()}`); });
  page.on("pageerror", (e) => problems.push(`uncaught: ${e.message}`));
  page.on("requestfailed", (r) => problems.push(`request failed: ${r.url()} ${r.failure()?.errorText}`));
  page.on("response", (r) => {
    if (r.status() >= 400) {
      problems.push(`HTTP ${r.status()}: ${r.url()}`);
    }
  });
  const dialogs = [];
  page.on("dialog", async (d) => {
    dialogs.push(d.type());
    if (d.type() === "confirm") await d.accept();
    else if (d.type() === "prompt") await d.accept(token);
    else await d.dismiss();
  });

  // The jobs page.
  await page.goto(base + "/");
  const row = page.locator("tr[data-job]", { hasText: "dashboard-demo" });
  await row.waitFor({ timeout: 20_000 });
  await row.locator(".badge[data-state=RUNNING]").waitFor({ timeout: 20_000 });
  await row.locator("[role=progressbar]").waitFor();
  await page.screenshot({ path: `${out}/jobs.png` });
  step("the jobs page lists the job, RUNNING, with a progress bar");

  // The job page.
  await row.locator("a").click();
  await page.waitForURL(/#\/jobs\/\d+$/);
  const bar = page.locator("h1 + [role=progressbar]");
  await bar.waitFor();
  const done = async () => {
    const label = await bar.getAttribute("aria-label");
    return Number(label.split(" ")[0].replaceAll(",", ""));
  };
  await page.screenshot({ path: `${out}/job-start.png`, fullPage: true });
  const first = await done();
  await page.waitForFunction(
    (before) => {
      const label = document.querySelector("h1 + [role=progressbar]").getAttribute("aria-label");
      return Number(label.split(" ")[0].replaceAll(",", "")) > before;
    },
    first,
    { timeout: 20_000 },
  );
  const second = await done();
  if (!(second > first)) fail(`progress did not advance: ${first} then ${second}`);
  step(`progress advances: ${first} then ${second} rows`);

  // A checkpoint in the timeline: a row in the table and a drawn chart.
  await page.locator("[data-table=checkpoints] tr[data-checkpoint]").first().waitFor({ timeout: 20_000 });
  const drawn = await page.locator("[data-panel=checkpoints] canvas").count();
  if (drawn === 0) fail("the checkpoint timeline has no chart");
  // Samples enough for lines, and the rate limit seen by the throttle figure.
  await page.waitForFunction(() =>
    document.querySelector("[data-figure=throttle] .value")?.textContent.includes("rate limit"),
    null, { timeout: 20_000 });
  await page.waitForFunction(() =>
    Number(document.querySelector("[data-figure=dead-letters] .value")?.textContent.replaceAll(",", "")) > 0,
    null, { timeout: 20_000 });
  await page.waitForTimeout(6_000);
  const checkpoints = await page.locator("[data-table=checkpoints] tr[data-checkpoint]").count();
  await page.screenshot({ path: `${out}/job-mid-run.png`, fullPage: true });
  step(`a checkpoint timeline (${checkpoints} rows shown), throttle and dead letters shown`);

  // A phone-sized screen: the same page, nothing wider than the screen.
  const phone = await browser.newPage({ viewport: { width: 390, height: 844 }, isMobile: true });
  phone.on("console", (m) => { if (m.type() === "error") problems.push(`phone console: ${m.text()}`); });
  await phone.goto(page.url());
  await phone.locator("[data-table=checkpoints]").waitFor({ timeout: 20_000 });
  const overflow = await phone.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  if (overflow > 1) fail(`the job page is ${overflow}px wider than a phone's screen`);
  await phone.screenshot({ path: `${out}/job-phone.png`, fullPage: true });
  await phone.close();
  step("on a phone-sized screen the page fits its width");

  // Cancel: confirmed, the token asked for and given, the job CANCELLED.
  await page.locator("h1 button[data-action=cancel]").click();
  await page.locator("h1 .badge[data-state=CANCELLED]").waitFor({ timeout: 30_000 });
  if (dialogs.join(",") !== "confirm,prompt") fail(`dialogs were ${dialogs.join(",") || "none"}`);
  const id = page.url().match(/#\/jobs\/(\d+)$/)[1];
  const job = await (await fetch(`${base}/api/v1/jobs/${id}`)).json();
  if (job.state !== "CANCELLED") fail(`the API says ${job.state} after the cancel`);
  await page.waitForTimeout(2_500);
  await page.screenshot({ path: `${out}/job-cancelled.png`, fullPage: true });
  step("cancel asked for confirmation and the token, and the job ended CANCELLED");

  // The job that failed earlier in the same store: its error, and that a retry will not help.
  await page.goto(base + "/#/");
  const failed = page.locator("tr[data-job]", { hasText: "dashboard-over-budget" });
  await failed.locator(".badge[data-state=FAILED]").waitFor({ timeout: 20_000 });
  await failed.locator("a").click();
  const panel = page.locator("[data-panel=error]");
  await panel.waitFor({ timeout: 20_000 });
  const said = await panel.textContent();
  for (const part of ["bad_input", "max_bad_rows = 10", "fail the same way"]) {
    if (!said.includes(part)) fail(`the error panel does not say "${part}": ${said}`);
  }
  await page.screenshot({ path: `${out}/job-failed.png`, fullPage: true });
  step("a failed job's page shows its error and that a retry will not help");

  await page.close();
  if (problems.length > 0) fail("the page reported problems:\n  " + problems.join("\n  "));
  step("no console errors, failed requests or uncaught exceptions");
} finally {
  await browser.close();
}
