// Shared by the dashboard (index.html) and /sim (sim.html): loaded before their scripts.

// A duration as apportion writes it everywhere (format_duration in apportion/core/units.py,
// what the CLI prints): rounded to the second, at most two units: 45 s, 2 min 5 s, 1 h,
// 1 h 30 min, 3 d 4 h.
function dur(s) {
  if (s === null || s === undefined || !isFinite(s)) return "-";
  s = Math.max(0, Math.round(s));
  const units = [["d", 86400], ["h", 3600], ["min", 60], ["s", 1]];
  for (let i = 0; i < units.length; i++) {
    const [name, size] = units[i];
    if (s >= size || size === 1) {
      let text = `${Math.floor(s / size)} ${name}`;
      if (i + 1 < units.length) {  // the next unit, if any of it is left ("1 h 30 min")
        const [restName, restSize] = units[i + 1];
        const rest = Math.floor((s % size) / restSize);
        if (rest) text += ` ${rest} ${restName}`;
      }
      return text;
    }
  }
}
