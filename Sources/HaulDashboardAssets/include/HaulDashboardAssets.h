#ifndef HAUL_DASHBOARD_ASSETS_H
#define HAUL_DASHBOARD_ASSETS_H

#include <stddef.h>

/// One file of the dashboard, as it is served.
typedef struct {
    /// The path it is served at ("/" for the page).
    const char *path;
    /// Its Content-Type.
    const char *contentType;
    /// Its bytes, `count` of them.
    const unsigned char *bytes;
    size_t count;
} HaulDashboardAsset;

/// Every file of the dashboard.
extern const HaulDashboardAsset *const haul_dashboard_assets;
/// How many there are.
extern const size_t haul_dashboard_asset_count;

#endif
