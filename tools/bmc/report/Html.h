//===- Html.h - escaping, number formats and an SVG builder -----*- C++ -*-===//

#ifndef BMC_TOOLS_BMC_REPORT_HTML_H
#define BMC_TOOLS_BMC_REPORT_HTML_H

#include "llvm/ADT/StringRef.h"

#include <string>

namespace bmc::report {

/// Text made safe inside HTML and SVG elements and attributes.
std::string escape(llvm::StringRef text);

/// "19.110 s", "2.55 ms", or "12.3 us" under a millisecond: tiny models
/// have steps of microseconds, which plans' "0.00 ms" would hide.
std::string duration(double seconds);

/// Categorical colours (Tableau 10), readable on white and in print.
const char *palette(int index);

/// An SVG drawing: shapes in user units, `width` x `height`, scaled to the
/// page width by CSS. Every shape may carry a tooltip (<title>).
class Svg {
public:
  Svg(double width, double height, std::string label);
  void rect(double x, double y, double w, double h, llvm::StringRef fill,
            llvm::StringRef tooltip = "", llvm::StringRef cssClass = "");
  void text(double x, double y, llvm::StringRef text,
            llvm::StringRef anchor = "start", double size = 11,
            llvm::StringRef fill = "#222");
  void line(double x1, double y1, double x2, double y2, llvm::StringRef stroke,
            double width = 1, bool dashed = false);
  void polyline(const std::string &points, llvm::StringRef stroke);
  /// The finished <svg> element.
  std::string str() const;

private:
  double width_, height_;
  std::string label_, body_;
};

} // namespace bmc::report

#endif // BMC_TOOLS_BMC_REPORT_HTML_H
