// A small SVG writer for reports (the HTML report's charts and the families'
// drawings of a failing case, kprop/drawing.h). Hand-rolled: Debian 12 ships
// no C++ SVG library, and what a report needs (rectangles, lines, circles,
// text, a colour scale) is a few dozen lines. Coordinates are in pixels;
// every text is escaped here, so callers pass plain strings.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kprop::svg {

// &, <, >, " and ' as entities; control characters as spaces.
std::string escape(std::string_view text);
// A number as SVG wants it: short, no exponent for ordinary sizes.
std::string num(double x);

// The report's colours (one place, so drawings agree with their legends).
namespace color {
inline constexpr const char* target = "#d6402b";     // what the target did (red-orange)
inline constexpr const char* oracle = "#1f6fd1";     // what the reference / oracle did (blue)
inline constexpr const char* both = "#7a3fb0";       // target and oracle agree (purple)
inline constexpr const char* neutral = "#9aa3ad";    // context, unused
inline constexpr const char* masked = "#e6e8eb";     // masked out, empty
inline constexpr const char* visible = "#c9dcf2";    // visible, allowed
inline constexpr const char* bad = "#c2185b";        // non-finite, stale, wrong
inline constexpr const char* ink = "#1d232a";        // labels
inline constexpr const char* grid = "#ffffff";       // cell borders
inline constexpr const char* tile = "#2b2f36";       // tile boundaries
inline constexpr const char* highlight = "#f2b705";  // near ties, the failing element
}  // namespace color

// |error| / bound on a fixed scale: 0 white-ish green, 1 (the bound) amber,
// >= 4 dark red; NaN or inf: color::bad. One scale for every drawing so a
// legend (error_legend) reads the same everywhere.
std::string error_color(double ratio);
// A sequential ramp for counts and magnitudes, t in [0, 1].
std::string ramp(double t);

class Canvas {
 public:
  Canvas(double width, double height, std::string css_class = "", std::string aria_label = "");

  // Every shape takes an optional tooltip (<title>) and CSS class.
  Canvas& rect(double x, double y, double w, double h, const std::string& fill,
               const std::string& stroke = "none", double stroke_width = 1, const std::string& tooltip = "",
               const std::string& css_class = "");
  Canvas& line(double x1, double y1, double x2, double y2, const std::string& stroke, double width = 1,
               const std::string& dash = "", const std::string& css_class = "");
  Canvas& circle(double cx, double cy, double r, const std::string& fill, const std::string& stroke = "none",
                 double stroke_width = 1, const std::string& tooltip = "", const std::string& css_class = "");
  // anchor: start, middle, end.
  Canvas& text(double x, double y, const std::string& text, double size = 11,
               const std::string& anchor = "start", const std::string& fill = color::ink,
               const std::string& css_class = "", bool bold = false);
  // Text turned by `degrees` about its anchor (x, y), left-aligned.
  Canvas& rotated_text(double x, double y, const std::string& text, double size, double degrees,
                       const std::string& css_class = "");
  Canvas& path(const std::string& d, const std::string& stroke, double width = 1,
               const std::string& fill = "none", const std::string& css_class = "",
               const std::string& dash = "");
  // A legend entry: a swatch (square or circle) and its label; returns the x after it.
  double swatch(double x, double y, const std::string& fill, const std::string& label, bool round = false,
                const std::string& stroke = "none");
  // The error_color scale from 0 to 4 × the bound, with ticks, at (x, y).
  Canvas& error_legend(double x, double y, double width = 200);

  double width() const { return width_; }
  double height() const { return height_; }
  // Grows the canvas (drawings that lay out as they go).
  void fit(double width, double height);
  std::string str() const;

 private:
  double width_, height_;
  std::string class_, label_, body_;
};

// Charts for the statistics section: a bar chart of labelled counts.
std::string bar_chart(const std::string& title, const std::vector<std::pair<std::string, double>>& bars,
                      double width = 300, const std::string& fill = color::oracle);

}  // namespace kprop::svg
