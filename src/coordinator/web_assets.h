// The dashboard's files (web/), compiled in by cmake/embed_web.cmake: served
// at /ui/<name> (index.html also at /), with uPlot at /ui/uplot.min.js and
// /ui/uplot.min.css.
#pragma once

#include <cstddef>
#include <vector>

namespace claw {

struct WebAsset {
  const char* path;  // "/ui/app.js"
  const char* content_type;
  const unsigned char* data;
  size_t size;
};

const std::vector<WebAsset>& WebAssets();

}  // namespace claw
