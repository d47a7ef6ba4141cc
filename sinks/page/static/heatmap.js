// Rank x time heatmap of lateness on a <canvas>: columns from GET /api/jobs/<job>/lateness,
// fetched incrementally (?after=<ts_ns of the newest column held>).
"use strict";

// YlOrBr-like sequential scale, light (on time) to dark brown (late).
const STOPS = [[255, 247, 188], [254, 196, 79], [254, 153, 41], [217, 95, 14], [153, 52, 4]];
const UNKNOWN = [232, 234, 237];
const MAX_HEIGHT = 320;  // px; a rank (or bin) is at least one pixel row, at most 320 / ranks

function colour(v, max) {
  if (v === null || v === undefined) return UNKNOWN;
  const x = Math.max(0, Math.min(1, v / max)) * (STOPS.length - 1);
  const i = Math.min(STOPS.length - 2, Math.floor(x));
  const f = x - i;
  return STOPS[i].map((c, k) => Math.round(c + f * (STOPS[i + 1][k] - c)));
}

class Heatmap {
  constructor(canvas, job) {
    this.canvas = canvas;
    this.job = job;
    this.bin = 1;
    this.columns = [];   // {ts_ns, values_ms}
    this.maxColumns = 600;
    this.ranks = 0;      // world size, for the axis
    canvas.addEventListener("mousemove", (e) => this.hover(e));
    canvas.addEventListener("mouseleave", () => { document.getElementById("heatmap-hover").textContent = ""; });
  }

  async update() {
    const after = this.columns.length ? this.columns[this.columns.length - 1].ts_ns : 0;
    const got = await fetchJSON(`/api/jobs/${encodeURIComponent(this.job)}/lateness?after=${after}`);
    if (!got) return;
    if (got.bin !== this.bin) { this.columns = []; this.bin = got.bin; }
    this.maxColumns = got.max_columns || this.maxColumns;
    this.columns.push(...got.columns);
    if (this.columns.length > this.maxColumns) this.columns.splice(0, this.columns.length - this.maxColumns);
    this.draw();
  }

  draw() {
    const cols = this.columns;
    const bins = cols.reduce((m, c) => Math.max(m, c.values_ms.length), 0);
    const c = this.canvas;
    c.dataset.columns = cols.length;
    c.dataset.bins = bins;
    if (!cols.length || !bins) return;
    let max = 1;
    for (const col of cols) for (const v of col.values_ms) if (v !== null && v > max) max = v;
    c.dataset.maxMs = max.toFixed(1);
    // One pixel per (column, row) off screen, scaled up without smoothing. More bins than
    // pixel rows: a row shows the latest of its bins, so no late rank disappears.
    const group = Math.ceil(bins / MAX_HEIGHT);
    const rows = Math.ceil(bins / group);
    const img = new ImageData(cols.length, rows);
    cols.forEach((col, x) => {
      for (let y = 0; y < rows; y++) {
        const rgb = colour(this.value(col, y, group), max);
        const o = (y * cols.length + x) * 4;
        img.data[o] = rgb[0]; img.data[o + 1] = rgb[1]; img.data[o + 2] = rgb[2]; img.data[o + 3] = 255;
      }
    });
    const off = document.createElement("canvas");
    off.width = cols.length; off.height = rows;
    off.getContext("2d").putImageData(img, 0, 0);
    c.height = Math.max(64, rows * Math.max(1, Math.floor(MAX_HEIGHT / rows)));
    const ctx = c.getContext("2d");
    ctx.imageSmoothingEnabled = false;
    ctx.fillStyle = "#f0f0f0";
    ctx.fillRect(0, 0, c.width, c.height);
    const w = c.width * Math.min(1, cols.length / Math.max(60, cols.length));  // fill from the right as columns arrive
    ctx.drawImage(off, c.width - w, 0, w, c.height);
    this.drawn = { x0: c.width - w, w: w, rows: rows, group: group };
    document.getElementById("legend-max").textContent = `${max.toFixed(1)} ms`;
    const span = (cols[cols.length - 1].ts_ns - cols[0].ts_ns) / 1e9;
    document.getElementById("heatmap-from").textContent = `${fmtAge(span)} ago`;
    const last = Math.max(this.ranks, bins * this.bin) - 1;
    const axis = document.getElementById("heatmap-ranks").children;
    axis[0].textContent = "rank 0";
    axis[1].textContent = `rank ${last}`;
    document.getElementById("heatmap-ranks").style.height = `${c.height}px`;
  }

  // The largest value of the `group` bins of pixel row `y` (null when all are unknown).
  value(col, y, group) {
    let v = null;
    for (let b = y * group; b < Math.min(col.values_ms.length, (y + 1) * group); b++) {
      const x = col.values_ms[b];
      if (x !== null && x !== undefined && (v === null || x > v)) v = x;
    }
    return v;
  }

  hover(e) {
    const d = this.drawn;
    if (!d) return;
    const r = this.canvas.getBoundingClientRect();
    const x = (e.clientX - r.left) * (this.canvas.width / r.width) - d.x0;
    const y = (e.clientY - r.top) * (this.canvas.height / r.height);
    const out = document.getElementById("heatmap-hover");
    if (x < 0) { out.textContent = ""; return; }
    const col = this.columns[Math.min(this.columns.length - 1, Math.floor(x / d.w * this.columns.length))];
    const row = Math.min(d.rows - 1, Math.floor(y / this.canvas.height * d.rows));
    const v = this.value(col, row, d.group);
    const last = this.columns[this.columns.length - 1].ts_ns;
    const size = this.bin * d.group;
    const ranks = size > 1 ? `ranks ${row * size}–${(row + 1) * size - 1}` : `rank ${row}`;
    out.textContent = `${ranks}, ${fmtAge((last - col.ts_ns) / 1e9)} ago: ` +
      (v === null || v === undefined ? "unknown" : `${v.toFixed(2)} ms late`);
  }
}
