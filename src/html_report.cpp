// The HTML report (--format html --out report.html): one self-contained page,
// inline CSS and SVG, no script and nothing fetched. The run's summary, its
// statistics as small charts (kprop/stats.h), each failure with its case
// drawn by its family (kprop/drawing.h) and its measured values; for
// --mutants the kill matrix. docs/REPORT.md describes what is drawn.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "kprop/errors.h"
#include "kprop/reasons.h"
#include "kprop/report.h"
#include "kprop/stats.h"
#include "kprop/svg.h"

namespace kprop {
namespace {

using svg::escape;

constexpr const char* kStyle = R"(
body{font-family:"DejaVu Sans",Helvetica,Arial,sans-serif;margin:24px 32px;color:#1d232a;background:#fff;max-width:1400px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #d5dae0;padding-bottom:4px}
h3{font-size:15px;margin:18px 0 6px}.sub{color:#56606b;font-size:13px}
.status{display:inline-block;padding:3px 10px;border-radius:4px;font-weight:bold;color:#fff;font-size:14px}
.passed{background:#2e7d32}.failed,.crashed{background:#c62828}.gave-up{background:#ef6c00}.skipped,.interrupted{background:#6d7781}
table{border-collapse:collapse;font-size:13px;margin:6px 0}th,td{border:1px solid #d5dae0;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f2f4f7}td.num{text-align:right;font-variant-numeric:tabular-nums}
.charts{display:flex;flex-wrap:wrap;gap:18px 28px;align-items:flex-start}
.failure{border:1px solid #e0b4b4;border-left:5px solid #c62828;border-radius:4px;padding:8px 14px;margin:14px 0;background:#fffafa}
.failure .msg{font-family:"DejaVu Sans Mono",monospace;font-size:12.5px;white-space:pre-wrap;background:#fff;border:1px solid #eee;padding:6px}
pre{font-family:"DejaVu Sans Mono",monospace;font-size:12px;background:#f6f8fa;border:1px solid #e3e6ea;padding:8px;overflow-x:auto;max-height:360px}
.drawing{overflow-x:auto;margin:8px 0;background:#fff}.note{color:#8a5a00;font-size:13px}
details summary{cursor:pointer;font-size:13px;color:#33495f}
svg text{font-family:"DejaVu Sans",Helvetica,Arial,sans-serif}
)";

std::string status_class(RunStatus s) {
  std::string name = run_status_name(s);
  std::replace(name.begin(), name.end(), ' ', '-');
  return name;
}

std::string page(const std::string& title, const std::string& body) {
  return fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<meta name=\"generator\" content=\"kprop "
      "prop_runner\">\n<title>{}</title>\n<style>{}</style>\n</head>\n"
      "<body>\n{}</body>\n</html>\n",
      escape(title), kStyle, body);
}

std::string measured_table(const std::vector<Measured>& measured) {
  if (measured.empty()) return "";
  std::string out = "<table class=\"measured\"><tr><th>measured</th><th>value</th></tr>";
  for (const auto& m : measured)
    out += fmt::format("<tr><td>{}</td><td class=\"num\">{:.17g}</td></tr>", escape(m.name), m.value);
  return out + "</table>";
}

std::string finding_html(const Finding& f, const RunReport& r) {
  std::string out = fmt::format("<section class=\"failure\" data-invariant=\"{}\" data-kind=\"{}\">",
                                escape(f.invariant), escape(f.kind));
  out += f.kind == "invariant"
             ? fmt::format("<h3>Counterexample: {} broken by target {}</h3>", escape(f.invariant),
                           escape(r.target))
             : fmt::format("<h3>Target failure ({}): target {}</h3>", escape(f.kind), escape(r.target));
  out += fmt::format("<div class=\"msg\">{}</div>", escape(f.message));
  out += fmt::format("<p class=\"sub\">shrunk: {} (size {} → {} in {} steps, {:.2f} s{})</p>",
                     escape(f.stats.summary), f.original_size, f.stats.size, f.shrink_steps, f.shrink_seconds,
                     f.shrink_interrupted ? ", stopped early: best so far" : "");
  if (!f.drawing_svg.empty()) out += "<div class=\"drawing\">" + f.drawing_svg + "</div>";
  if (!f.drawing_note.empty()) out += fmt::format("<p class=\"note\">{}</p>", escape(f.drawing_note));
  out += measured_table(f.measured);
  if (!f.case_yaml.empty())
    out += "<details open><summary>case (YAML)</summary><pre>" +
           escape(shown_case(f.case_yaml, f.corpus_path)) + "</pre></details>";
  if (!f.corpus_path.empty()) out += fmt::format("<p class=\"sub\">stored: {}</p>", escape(f.corpus_path));
  if (!f.replay_command.empty())
    out += fmt::format("<p class=\"sub\">replay: <code>{}</code></p>", escape(f.replay_command));
  if (const std::string w = replay_warning(f); !w.empty())
    out += fmt::format("<p class=\"note\">{}</p>", escape(w));
  return out + "</section>\n";
}

std::string invariants_table(const RunReport& r) {
  std::string out =
      "<table class=\"invariants\"><tr><th>invariant</th><th>status</th><th>checked</th><th>discarded</th>"
      "<th>declined</th><th>n/a</th><th>worst error/bound</th><th>why not checked</th></tr>";
  for (const auto& inv : r.invariants) {
    std::string reasons;
    // Why an invariant that checked nothing (n/a) or too little (gave up) did, as the text says.
    const bool says_why =
        inv.status == InvariantStatus::not_applicable || inv.status == InvariantStatus::gave_up;
    if (says_why && !inv.last_discard.empty()) reasons = "<b>" + escape(inv.last_discard) + "</b>";
    for (const auto& [why, n] : grouped_reasons(inv.discard_reasons))
      reasons += fmt::format("{}{} ({})", reasons.empty() ? "" : "<br>", escape(why), n);
    out += fmt::format(
        "<tr><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td "
        "class=\"num\">{}</td>"
        "<td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
        escape(inv.name), escape(invariant_status_name(inv.status)), inv.checked(), inv.discarded,
        inv.declined, inv.not_applicable,
        // A failed invariant's worst ratio is of the cases it passed (the
        // failure's own is in its finding), as the text says.
        inv.max_error_ratio >= 0
            ? fmt::format("{}{}", ratio_text(inv.max_error_ratio),
                          inv.status == InvariantStatus::failed ? " on the cases that passed" : "")
            : "",
        reasons);
  }
  return out + "</table>";
}

// The time split as one stacked bar.
std::string time_chart(const TimeSplit& t) {
  const std::vector<std::pair<const char*, double>> parts = {
      {"generation", t.generation}, {"target", t.target},       {"reference", t.reference},
      {"invariants", t.invariants}, {"shrinking", t.shrinking}, {"other", t.other}};
  const char* colors[] = {"#8da0cb", svg::color::target, svg::color::oracle, "#66a61e", "#e7298a", "#b3b3b3"};
  double total = 0;
  for (const auto& p : parts) total += p.second;
  svg::Canvas c(560, 74, "chart time", "time split");
  c.text(0, 13, fmt::format("where the time went ({:.3f} s)", total), 12, "start", svg::color::ink, "", true);
  double x = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const double w = total > 0 ? 540 * parts[i].second / total : 0;
    c.rect(x, 20, w, 18, colors[i], "none", 0, fmt::format("{}: {:.4f} s", parts[i].first, parts[i].second),
           "bar");
    x += w;
  }
  double lx = 0;
  for (size_t i = 0; i < parts.size(); ++i)
    lx = c.swatch(lx, 60, colors[i],
                  fmt::format("{} {:.0f}%", parts[i].first, total > 0 ? 100 * parts[i].second / total : 0));
  return c.str();
}

std::string stats_html(const RunReport& r) {
  const RunStats& s = r.stats;
  std::string out = fmt::format(
      "<h2>Statistics</h2><p class=\"sub\">{} case(s) drawn; the family's size "
      "measure: min {:g}, median {:g}, max {:g}</p><div class=\"charts\">",
      s.cases, s.size.min(), s.size.median(), s.size.max());
  out += svg::bar_chart("size (the family's measure)", s.size.histogram());
  for (const auto& d : s.dims)
    out += svg::bar_chart(d.kinds.empty() ? fmt::format("{} (median {:g})", d.name, d.median()) : d.name,
                          d.histogram());
  out += "</div><div class=\"charts\">" + time_chart(s.time) + "</div>";
  out +=
      "<h3>Error / bound of the passing checks</h3><p class=\"sub\">how close the target came to each "
      "numeric "
      "bound (1 = at the bound), log scale</p><div class=\"charts\">";
  bool any = false;
  for (const auto& [name, q] : s.ratios) {
    if (q.ratios.empty()) continue;
    any = true;
    out += svg::bar_chart(fmt::format("{} (max {:.3g})", name, q.quantile(1)), q.histogram(), 300, "#66a61e");
  }
  if (!any) out += "<p class=\"sub\">no numeric invariant reported its margin</p>";
  return out + "</div>";
}

std::string run_body(const RunReport& r) {
  std::string out = fmt::format(
      "<h1>kprop {} <span class=\"status {}\">{}</span></h1>"
      "<p class=\"sub\">family {} · target {} · reference {} · seed {} · {} drawn{}, {} checked, {} "
      "discarded, {} declined "
      "· "
      "{:.2f} s{}{}{}</p>",
      escape(r.spec), status_class(r.status), escape(run_status_name(r.status)), escape(r.family),
      escape(r.target), escape(r.reference), r.seed, r.trials,
      r.search.cases > 0 ? fmt::format(" + {} by the search", r.search.cases) : "", r.checked, r.discarded,
      r.declined, r.seconds, r.profile.empty() ? "" : " · profile " + escape(r.profile),
      r.domain.empty() ? "" : " · domain " + escape(r.domain),
      r.shard.empty() ? "" : " · shard " + escape(r.shard));
  if (!r.detail.empty()) out += fmt::format("<p class=\"note\">{}</p>", escape(r.detail));
  for (const auto& h : r.health)
    out +=
        fmt::format("<p class=\"note\">health check {} failed: {}</p>", escape(h.check), escape(h.message));
  if (!r.focused.empty()) out += fmt::format("<p class=\"note\">focused: {}</p>", escape(focused_text(r)));
  if (r.declined > 0)
    out += fmt::format("<p class=\"note\">{} case(s) declined by the target (not checked): {}</p>",
                       r.declined, escape(reasons_summary(r.decline_reasons, 5)));
  if (!r.unchecked_outputs.empty())
    out += fmt::format("<p class=\"note\">unchecked outputs: {} (no invariant of this run reads them)</p>",
                       escape(join(r.unchecked_outputs)));
  out += "<h2>Invariants</h2>" + invariants_table(r);
  if (r.search.ran) out += "<h2>Targeted search</h2><pre>" + escape(search_text(r)) + "</pre>";
  const auto findings = r.findings();
  if (!findings.empty()) {
    out += fmt::format("<h2>Failures ({})</h2>", findings.size());
    for (const Finding* f : findings) out += finding_html(*f, r);
  }
  return out + stats_html(r);
}

// The kill matrix: mutants down, invariants across, trials to kill per cell.
std::string kill_matrix_svg(const KillMatrix& m) {
  const double cell_w = 46, cell_h = 22, left = 190, top = 150;
  svg::Canvas c(left + cell_w * static_cast<double>(m.invariants.size()) + 20,
                top + cell_h * static_cast<double>(m.mutants.size()) + 60, "kill-matrix", "kill matrix");
  int64_t most = 1;
  for (const auto& row : m.cells)
    for (const auto& cell : row)
      if (cell.state == KillCell::State::killed) most = std::max(most, cell.trials);
  for (size_t k = 0; k < m.invariants.size(); ++k) {
    const double x = left + cell_w * (static_cast<double>(k) + 0.5);
    // Column labels at -50°, from the top of their column.
    std::string label = m.invariants[k];
    if (label.size() > 26) label = label.substr(0, 25) + "…";
    c.rotated_text(x, top - 6, label, 10.5, -50, "col-label");
  }
  for (size_t i = 0; i < m.mutants.size(); ++i) {
    const double y = top + cell_h * static_cast<double>(i);
    c.text(left - 6, y + 15, m.mutants[i], 11, "end", svg::color::ink, "row-label");
    for (size_t k = 0; k < m.invariants.size(); ++k) {
      const KillCell& cell = m.cells[i][k];
      const double x = left + cell_w * static_cast<double>(k);
      std::string fill = "#f4f5f7";
      if (cell.state == KillCell::State::killed)
        fill = svg::ramp(0.35 + 0.65 * (1 - std::log1p(static_cast<double>(cell.trials)) /
                                                std::log1p(static_cast<double>(most))));
      if (cell.state == KillCell::State::held) fill = "#fde0dd";
      if (cell.state == KillCell::State::crashed) fill = "#d6402b";
      if (cell.state == KillCell::State::absent) fill = "#ffffff";
      c.rect(x, y, cell_w, cell_h, fill, "#ffffff", 1,
             fmt::format("{} × {}: {}", m.mutants[i], m.invariants[k],
                         cell.state == KillCell::State::killed
                             ? fmt::format("killed after {} trial(s)", cell.trials)
                         : cell.state == KillCell::State::held
                             ? fmt::format("held on {} checked case(s)", cell.trials)
                             : cell.text()),
             cell.state == KillCell::State::killed ? "kill" : "cell");
      c.text(x + cell_w / 2, y + 15, cell.text(), 11, "middle",
             cell.state == KillCell::State::killed && cell.trials * 3 < most ? "#ffffff" : svg::color::ink);
    }
  }
  const double ly = top + cell_h * static_cast<double>(m.mutants.size()) + 30;
  double x = c.swatch(0, ly, svg::ramp(0.9), "killed (number: trials to kill; darker = sooner)");
  x = c.swatch(x, ly, "#fde0dd", "- held (survived this invariant)");
  x = c.swatch(x, ly, "#f4f5f7", ". not reached");
  c.swatch(x, ly, "#ffffff", "x not in that mutant's run");
  return c.str();
}

class HtmlReporter final : public Reporter {
 public:
  std::string run(const RunReport& r) const override { return page("kprop " + r.spec, run_body(r)); }
  std::string error(const std::string& message, int exit_code) const override {
    return page("kprop: error",
                fmt::format("<h1>kprop <span class=\"status failed\">ERROR (exit {})</span></h1>"
                            "<p>{}</p>",
                            exit_code, escape(message)));
  }

  std::string mutants(const Spec& spec, const std::vector<MutantRow>& rows) const override {
    int killed = 0;
    for (const auto& row : rows) killed += row.killed;
    // The text's verdict (none could run here, no CUDA device: skipped, not red).
    const std::string verdict = mutants_verdict_name(rows);
    const char* css = verdict == "PASSED"                ? "passed"
                      : verdict == "FAILED"              ? "failed"
                      : verdict == "HEALTH CHECK FAILED" ? "gave-up"
                      : verdict == "SKIPPED"             ? "skipped"
                                                         : "interrupted";
    std::string body = fmt::format(
        "<h1>kprop {} — mutants <span class=\"status {}\">{}: {} of {} killed</span></h1><p "
        "class=\"sub\">family "
        "{} · "
        "seed {}</p>",
        escape(spec.name), css, verdict, killed, rows.size(), escape(spec.family->name()),
        rows.empty() ? 0 : rows[0].report.seed);
    body += "<h2>Kill matrix</h2><div class=\"drawing\">" + kill_matrix_svg(kill_matrix(rows)) + "</div>";
    body += "<table><tr><th>mutant</th><th>verdict</th><th>killed by</th><th>description</th></tr>";
    for (const auto& row : rows)
      body += fmt::format(
          "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}{}</td></tr>", escape(row.mutant),
          std::string_view(mutant_verdict(row)) == "survived"    ? std::string("<b>SURVIVED</b>")
          : std::string_view(mutant_verdict(row)) == "unreached" ? std::string("<b>UNREACHED</b>")
                                                                 : std::string(mutant_verdict(row)),
          escape(row.killed_by), escape(row.description),
          not_killed_note(row).empty() ? "" : "<br><small>" + escape(not_killed_note(row)) + "</small>");
    body += "</table>";
    for (const auto& row : rows) {
      const auto findings = row.report.findings();
      if (findings.empty()) continue;
      body +=
          fmt::format("<details><summary>{}: {} finding(s)</summary>", escape(row.mutant), findings.size());
      for (const Finding* f : findings) body += finding_html(*f, row.report);
      body += "</details>";
    }
    return page("kprop " + spec.name + " mutants", body);
  }

  std::string replay(const Spec& spec, const std::vector<ReplayRow>& rows) const override {
    const ReplayVerdict verdict = replay_verdict(rows);
    const char* css = verdict == ReplayVerdict::passed        ? "passed"
                      : verdict == ReplayVerdict::skipped     ? "skipped"
                      : verdict == ReplayVerdict::interrupted ? "interrupted"
                                                              : "failed";
    const auto passed = std::count_if(rows.begin(), rows.end(), [](const ReplayRow& r) {
      return replay_verdict(r) == ReplayVerdict::passed;
    });
    std::string body = fmt::format(
        "<h1>kprop {} — replay of {} corpus file(s) <span class=\"status {}\">{}: {} of {} "
        "passed</span></h1>",
        escape(spec.name), rows.size(), css, to_string(verdict), passed, rows.size());
    body += "<table><tr><th>file</th><th>result</th><th>detail</th></tr>";
    for (const auto& row : rows) {
      const ReplayVerdict v = replay_verdict(row);
      body += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td></tr>", escape(row.path),
                          v == ReplayVerdict::error         ? "ERROR"
                          : v == ReplayVerdict::interrupted ? "not replayed (interrupted)"
                          : v == ReplayVerdict::crashed     ? "<b>CRASH</b>"
                          : v == ReplayVerdict::failed      ? "<b>FAIL</b>"
                          : v == ReplayVerdict::skipped
                              ? (row.other_spec.empty() ? "not checked" : "not replayed")
                              : "ok",
                          escape(!row.error.empty()        ? row.error
                                 : !row.target_ok          ? row.target_detail
                                 : !row.mutant_still_fails ? mutant_failure(row)
                                                           : row.target_detail));
    }
    return page("kprop " + spec.name + " replay", body + "</table>");
  }
};

}  // namespace

std::unique_ptr<Reporter> make_html_reporter() {
  return std::make_unique<HtmlReporter>();
}

}  // namespace kprop
