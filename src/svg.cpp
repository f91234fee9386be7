#include "kprop/svg.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "kprop/errors.h"

namespace kprop::svg {

std::string escape(std::string_view raw) {
  // A worker's message may hold bytes that are not UTF-8; XML may not.
  const std::string text = valid_utf8(std::string(raw));
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    // U+FFFE and U+FFFF are valid UTF-8 but no XML 1.0 character (a parser
    // rejects the file): U+FFFD, as for invalid bytes.
    if (c == '\xEF' && i + 2 < text.size() && text[i + 1] == '\xBF' &&
        (text[i + 2] == '\xBE' || text[i + 2] == '\xBF')) {
      out += "\xEF\xBF\xBD";
      i += 2;
      continue;
    }
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += static_cast<unsigned char>(c) < 0x20 && c != '\n' ? ' ' : c;
    }
  }
  return out;
}

std::string num(double x) {
  if (!std::isfinite(x)) return "0";
  return fmt::format("{:.4g}", std::round(x * 100) / 100);
}

namespace {
struct Rgb {
  double r, g, b;
};
std::string hex(Rgb c) {
  auto ch = [](double v) { return static_cast<int>(std::lround(std::clamp(v, 0.0, 255.0))); };
  return fmt::format("#{:02x}{:02x}{:02x}", ch(c.r), ch(c.g), ch(c.b));
}
// Piecewise-linear interpolation through `stops` (t in [0, 1]).
std::string through(const std::vector<Rgb>& stops, double t) {
  t = std::clamp(t, 0.0, 1.0) * static_cast<double>(stops.size() - 1);
  const size_t i = std::min(static_cast<size_t>(t), stops.size() - 2);
  const double f = t - static_cast<double>(i);
  const Rgb& a = stops[i];
  const Rgb& b = stops[i + 1];
  return hex({a.r + (b.r - a.r) * f, a.g + (b.g - a.g) * f, a.b + (b.b - a.b) * f});
}
std::string tip(const std::string& tooltip) {
  return tooltip.empty() ? "" : "<title>" + escape(tooltip) + "</title>";
}
std::string cls(const std::string& css_class) {
  return css_class.empty() ? "" : " class=\"" + escape(css_class) + "\"";
}
}  // namespace

std::string error_color(double ratio) {
  if (!std::isfinite(ratio)) return color::bad;
  // 0 .. 1 (within the bound): pale green to amber; 1 .. 4: amber to dark red.
  static const std::vector<Rgb> within = {{237, 248, 233}, {161, 217, 155}, {254, 217, 118}, {253, 141, 60}};
  static const std::vector<Rgb> beyond = {{253, 141, 60}, {227, 26, 28}, {128, 0, 38}};
  return ratio <= 1 ? through(within, ratio) : through(beyond, (ratio - 1) / 3);
}

std::string ramp(double t) {
  static const std::vector<Rgb> stops = {{247, 251, 255}, {158, 202, 225}, {66, 146, 198}, {8, 69, 148}};
  return through(stops, t);
}

Canvas::Canvas(double width, double height, std::string css_class, std::string aria_label)
    : width_(width), height_(height), class_(std::move(css_class)), label_(std::move(aria_label)) {}

void Canvas::fit(double width, double height) {
  width_ = std::max(width_, width);
  height_ = std::max(height_, height);
}

Canvas& Canvas::rect(double x, double y, double w, double h, const std::string& fill,
                     const std::string& stroke, double stroke_width, const std::string& tooltip,
                     const std::string& css_class) {
  body_ += fmt::format(
      R"(<rect x="{}" y="{}" width="{}" height="{}" fill="{}" stroke="{}" stroke-width="{}"{})", num(x),
      num(y), num(std::max(w, 0.0)), num(std::max(h, 0.0)), fill, stroke, num(stroke_width), cls(css_class));
  body_ += tooltip.empty() ? "/>" : ">" + tip(tooltip) + "</rect>";
  return *this;
}

Canvas& Canvas::line(double x1, double y1, double x2, double y2, const std::string& stroke, double width,
                     const std::string& dash, const std::string& css_class) {
  body_ += fmt::format(R"(<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="{}" stroke-width="{}"{}{}/>)",
                       num(x1), num(y1), num(x2), num(y2), stroke, num(width),
                       dash.empty() ? "" : " stroke-dasharray=\"" + dash + "\"", cls(css_class));
  return *this;
}

Canvas& Canvas::circle(double cx, double cy, double r, const std::string& fill, const std::string& stroke,
                       double stroke_width, const std::string& tooltip, const std::string& css_class) {
  body_ += fmt::format(R"(<circle cx="{}" cy="{}" r="{}" fill="{}" stroke="{}" stroke-width="{}"{})", num(cx),
                       num(cy), num(r), fill, stroke, num(stroke_width), cls(css_class));
  body_ += tooltip.empty() ? "/>" : ">" + tip(tooltip) + "</circle>";
  return *this;
}

Canvas& Canvas::text(double x, double y, const std::string& text, double size, const std::string& anchor,
                     const std::string& fill, const std::string& css_class, bool bold) {
  // Grow to hold the text: about 0.6 em per character in the report's sans-serif.
  const double w = 0.6 * size * static_cast<double>(text.size()) * (bold ? 1.08 : 1.0);
  fit(anchor == "start" ? x + w + 4 : anchor == "middle" ? x + w / 2 + 4 : x + 4, y + 4);
  body_ += fmt::format(R"(<text x="{}" y="{}" font-size="{}" text-anchor="{}" fill="{}"{}{}>{}</text>)",
                       num(x), num(y), num(size), anchor, fill, bold ? " font-weight=\"bold\"" : "",
                       cls(css_class), escape(text));
  return *this;
}

Canvas& Canvas::rotated_text(double x, double y, const std::string& text, double size, double degrees,
                             const std::string& css_class) {
  body_ += fmt::format(
      R"svg(<text x="{0}" y="{1}" font-size="{2}" fill="{3}" transform="rotate({4} {0} {1})"{5}>{6}</text>)svg",
      num(x), num(y), num(size), color::ink, num(degrees), cls(css_class), escape(text));
  return *this;
}

Canvas& Canvas::path(const std::string& d, const std::string& stroke, double width, const std::string& fill,
                     const std::string& css_class, const std::string& dash) {
  body_ += fmt::format(R"(<path d="{}" stroke="{}" stroke-width="{}" fill="{}"{}{}/>)", d, stroke, num(width),
                       fill, dash.empty() ? "" : " stroke-dasharray=\"" + dash + "\"", cls(css_class));
  return *this;
}

double Canvas::swatch(double x, double y, const std::string& fill, const std::string& label, bool round,
                      const std::string& stroke) {
  if (round)
    circle(x + 6, y - 4, 6, fill, stroke, 1.5);
  else
    rect(x, y - 10, 12, 12, fill, stroke, 1.5);
  text(x + 17, y, label, 11);
  // About 6.2 px per character at 11 px (the report's sans-serif).
  const double end = x + 17 + 6.2 * static_cast<double>(label.size()) + 14;
  fit(end, y + 6);
  return end;
}

Canvas& Canvas::error_legend(double x, double y, double width) {
  const int steps = 40;
  const double w = width / steps;
  text(x, y - 4, "|error| / bound", 11);
  for (int s = 0; s < steps; ++s) rect(x + s * w, y, w + 0.5, 10, error_color(4.0 * (s + 0.5) / steps));
  for (double tick : {0.0, 1.0, 2.0, 4.0}) {
    const double tx = x + width * tick / 4;
    line(tx, y, tx, y + 14, color::ink, 1);
    text(tx, y + 25, tick == 4 ? "≥4" : num(tick), 10, "middle");
  }
  rect(x + width + 12, y, 10, 10, color::bad);
  text(x + width + 26, y + 9, "NaN/inf", 10);
  return *this;
}

std::string Canvas::str() const {
  return fmt::format(
      R"(<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" viewBox="0 0 {} {}"{} role="img"{}>{}</svg>)",
      num(width_), num(height_), num(width_), num(height_), cls(class_),
      label_.empty() ? "" : " aria-label=\"" + escape(label_) + "\"", body_);
}

std::string bar_chart(const std::string& title, const std::vector<std::pair<std::string, double>>& bars,
                      double width, const std::string& fill) {
  const double row = 16, label_w = std::min(width * 0.45, 140.0), top = 20;
  Canvas c(width, top + row * static_cast<double>(std::max<size_t>(bars.size(), 1)) + 6, "chart", title);
  c.text(0, 13, title, 12, "start", color::ink, "", true);
  double most = 0;
  for (const auto& b : bars) most = std::max(most, b.second);
  const double bar_w = width - label_w - 56;
  for (size_t i = 0; i < bars.size(); ++i) {
    const double y = top + row * static_cast<double>(i);
    const double w = most > 0 ? bar_w * bars[i].second / most : 0;
    std::string label = bars[i].first;
    if (label.size() > 22) label = label.substr(0, 21) + "…";
    c.text(label_w - 4, y + 11, label, 10, "end");
    c.rect(label_w, y + 2, std::max(w, bars[i].second > 0 ? 1.5 : 0.0), row - 4, fill, "none", 0,
           fmt::format("{}: {:g}", bars[i].first, bars[i].second), "bar");
    c.text(label_w + w + 4, y + 11, fmt::format("{:g}", bars[i].second), 10);
  }
  if (bars.empty()) c.text(label_w, top + 11, "(none)", 10);
  return c.str();
}

}  // namespace kprop::svg
