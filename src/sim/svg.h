/*
 * SVG chart pieces shared by the simulator's two charts (report.c's
 * allocation curves and churn_report.c's nodes over time); defined in
 * report.c.  Coordinates are in pixels; l, t are the plot's left and top,
 * pw, ph its width and height.
 */
#ifndef GPUFRAC_SIM_SVG_H
#define GPUFRAC_SIM_SVG_H

#include <stdio.h>

/* Opens the <svg> of w x h pixels: white background and a bold title. */
void gf__svg_begin(FILE *fp, double w, double h, double l, const char *title);

/* A vertical grid line at x = px, labelled `label` below the plot. */
void gf__svg_xgrid(FILE *fp, double px, double t, double ph, double label);

/* A horizontal grid line at y = py, labelled `label` left of the plot. */
void gf__svg_ygrid(FILE *fp, double l, double pw, double py, double label);

/* The plot's frame and the two axis titles (h: the chart's height). */
void gf__svg_frame(FILE *fp, double l, double t, double pw, double ph, double h,
                   const char *xtitle, const char *ytitle);

/* The colour of series i. */
const char *gf__svg_color(int i);

/* Opens series i's polyline: the caller writes "x,y " points, then "\"/>\n".
 * Returns its colour. */
const char *gf__svg_series(FILE *fp, int i);

/* Series i's legend swatch at (x, y) and an open <text>: the caller writes
 * the label, then "</text>\n". */
void gf__svg_legend(FILE *fp, double x, double y, const char *color);

#endif
