// Text the report writers share: HTML escaping, a self-contained page (inline style, no script),
// and CSV fields quoted as RFC 4180 asks.
#pragma once

#include <string>

namespace moe::cli {

// Escapes &, <, >, " for HTML text and attributes.
std::string html_escape(const std::string& s);
// A complete page around `body` (already HTML) with `title` (escaped here).
std::string html_page(const std::string& title, const std::string& body);
// Quoted, with inner quotes doubled, when it holds a comma or a quote.
std::string csv_field(const std::string& s);

}  // namespace moe::cli
