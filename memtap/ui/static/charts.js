// Draws the charts whose specs the page embeds as JSON (#chart-data) with the vendored Chart.js.
(function () {
  "use strict";
  const holder = document.getElementById("chart-data");
  if (!holder || typeof Chart === "undefined") return;
  const specs = JSON.parse(holder.textContent);
  const colours = ["#2f6db5", "#e07b39", "#3a9a5b", "#9b59b6", "#c0392b"];
  window.memtapCharts = {};

  function bar(spec) {
    const datasets = Object.entries(spec.series).map(([label, data], i) => ({
      label, data, backgroundColor: colours[i % colours.length],
    }));
    if (spec.intervals) {
      datasets.push({
        label: "95% interval",
        data: spec.intervals.map((ci) => (ci ? [ci[0], ci[1]] : null)),
        backgroundColor: "rgba(120,120,120,0.35)",
      });
    }
    return { type: "bar", data: { labels: spec.labels, datasets }, options: { animation: false, maintainAspectRatio: false } };
  }

  function scatter(spec) {
    const run = spec.points.filter((p) => !p.baseline);
    const base = spec.points.filter((p) => p.baseline);
    const ds = (points, label, colour, style) => ({
      label, pointStyle: style, pointRadius: 7, backgroundColor: colour,
      data: points.map((p) => ({ x: p.x, y: p.y, name: p.label })),
    });
    return {
      type: "scatter",
      data: { datasets: [ds(run, "run", colours[0], "circle"), ds(base, "baselines", colours[1], "triangle")] },
      options: {
        animation: false, maintainAspectRatio: false,
        scales: { x: { title: { display: true, text: "stability" }, min: 0, max: 1 },
                  y: { title: { display: true, text: "plasticity" }, min: 0, max: 1 } },
        plugins: { tooltip: { callbacks: { label: (c) => c.raw.name + " (" + c.raw.x.toFixed(3) + ", " + c.raw.y.toFixed(3) + ")" } } },
      },
    };
  }

  for (const spec of specs) {
    const canvas = document.getElementById("chart-" + spec.id);
    if (!canvas) continue;
    window.memtapCharts[spec.id] = new Chart(canvas, spec.type === "scatter" ? scatter(spec) : bar(spec));
  }
})();
