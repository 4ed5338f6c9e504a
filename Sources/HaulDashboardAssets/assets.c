// The dashboard's files, taken whole into the binary at compile time (C23's #embed; the compiler records them as
// dependencies, so an edited file rebuilds this one).
#pragma clang diagnostic ignored "-Wc23-extensions"

#include "HaulDashboardAssets.h"

static const unsigned char index_html[] = {
#embed "assets/index.html"
};
static const unsigned char app_js[] = {
#embed "assets/app.js"
};
static const unsigned char fleet_js[] = {
#embed "assets/fleet.js"
};
static const unsigned char app_css[] = {
#embed "assets/app.css"
};

static const HaulDashboardAsset assets[] = {
    {"/", "text/html; charset=utf-8", index_html, sizeof index_html},
    {"/app.js", "text/javascript; charset=utf-8", app_js, sizeof app_js},
    {"/fleet.js", "text/javascript; charset=utf-8", fleet_js, sizeof fleet_js},
    {"/app.css", "text/css; charset=utf-8", app_css, sizeof app_css},
};

const HaulDashboardAsset *const haul_dashboard_assets = assets;
const size_t haul_dashboard_asset_count = sizeof assets / sizeof assets[0];
