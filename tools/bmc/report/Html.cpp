//===- Html.cpp - escaping and the SVG builder ----------------------------===//

#include "tools/bmc/report/Html.h"

#include "passes/plan/PlanOutput.h"

#include "llvm/Support/FormatVariadic.h"

#include <cmath>

using namespace bmc::report;

std::string bmc::report::escape(llvm::StringRef text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
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
      out += c;
    }
  }
  return out;
}

std::string bmc::report::duration(double seconds) {
  if (seconds != 0 && std::abs(seconds) < 1e-3)
    return llvm::formatv("{0:F1} us", seconds * 1e6).str();
  return bm::plan::formatSeconds(seconds);
}

const char *bmc::report::palette(int index) {
  static const char *colours[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759",
                                  "#76b7b2", "#edc948", "#b07aa1", "#ff9da7",
                                  "#9c755f", "#bab0ac"};
  return colours[((index % 10) + 10) % 10];
}

Svg::Svg(double width, double height, std::string label)
    : width_(width), height_(height), label_(std::move(label)) {}

void Svg::rect(double x, double y, double w, double h, llvm::StringRef fill,
               llvm::StringRef tooltip, llvm::StringRef cssClass) {
  body_ += llvm::formatv("<rect x=\"{0:F2}\" y=\"{1:F2}\" width=\"{2:F2}\" "
                         "height=\"{3:F2}\" fill=\"{4}\"",
                         x, y, std::max(w, 0.0), std::max(h, 0.0), fill)
               .str();
  if (!cssClass.empty())
    body_ += " class=\"" + cssClass.str() + "\"";
  if (tooltip.empty()) {
    body_ += "/>";
    return;
  }
  body_ += "><title>" + escape(tooltip) + "</title></rect>";
}

void Svg::text(double x, double y, llvm::StringRef text,
               llvm::StringRef anchor, double size, llvm::StringRef fill) {
  body_ += llvm::formatv("<text x=\"{0:F2}\" y=\"{1:F2}\" font-size=\"{2}\" "
                         "text-anchor=\"{3}\" fill=\"{4}\">{5}</text>",
                         x, y, size, anchor, fill, escape(text))
               .str();
}

void Svg::line(double x1, double y1, double x2, double y2,
               llvm::StringRef stroke, double width, bool dashed) {
  body_ += llvm::formatv("<line x1=\"{0:F2}\" y1=\"{1:F2}\" x2=\"{2:F2}\" "
                         "y2=\"{3:F2}\" stroke=\"{4}\" stroke-width=\"{5}\"{6}/>",
                         x1, y1, x2, y2, stroke, width,
                         dashed ? " stroke-dasharray=\"4 3\"" : "")
               .str();
}

void Svg::polyline(const std::string &points, llvm::StringRef stroke) {
  body_ += "<polyline fill=\"none\" stroke-width=\"1.5\" stroke=\"" +
           stroke.str() + "\" points=\"" + points + "\"/>";
}

std::string Svg::str() const {
  return llvm::formatv("<svg xmlns=\"http://www.w3.org/2000/svg\" "
                       "viewBox=\"0 0 {0:F0} {1:F0}\" width=\"{0:F0}\" "
                       "role=\"img\" aria-label=\"{2}\">",
                       width_, height_, escape(label_))
             .str() +
         body_ + "</svg>";
}
