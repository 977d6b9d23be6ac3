// Fills the status table from /api/health; text only (textContent), never HTML.
async function showHealth() {
  const table = document.getElementById("health");
  let rows;
  try {
    const report = await (await fetch("/api/health")).json();
    rows = [
      ["Status", report.ok ? "ready" : "not ready"],
      ["Database", report.database.description + (report.database.ok ? "" : " (unreachable)")],
      ["Embedder", report.embedder.model + " (" + report.embedder.state + ")"],
      ["Chat model", report.models.chat],
      ["Utility model", report.models.utility],
      ["Local model", report.local_model],
    ];
  } catch (error) {
    rows = [["Status", "cannot reach the server: " + error]];
  }
  table.replaceChildren(...rows.map(([name, value]) => {
    const tr = document.createElement("tr");
    for (const text of [name, value]) {
      const td = document.createElement("td");
      td.textContent = text;
      tr.append(td);
    }
    return tr;
  }));
}
showHealth();
