#include "tools/moeplan/report_format.h"

#include <fmt/format.h>

namespace moe::cli {

std::string html_escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    switch (ch) {
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
      default:
        out += ch;
    }
  }
  return out;
}

std::string html_page(const std::string& title, const std::string& body) {
  return fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title>\n"
      "<style>body{{font-family:sans-serif;margin:2em}}svg{{margin:0.5em}}"
      "table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:2px 6px;"
      "font-size:12px}}td:last-child{{overflow-wrap:anywhere}}</style></head><body>\n{}</body></"
      "html>\n",
      html_escape(title), body);
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"") == std::string::npos) return s;
  std::string q = "\"";
  for (char ch : s) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return q + "\"";
}

}  // namespace moe::cli
