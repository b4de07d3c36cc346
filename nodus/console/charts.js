// Time-series plots drawn with uPlot (vendored from npm: vendor/uPlot.iife.min.js defines window.uPlot).
//
// Each plot is a <figure> with a caption naming what it shows and a short text summary beside the canvas, so
// the numbers are readable without the picture (screen readers, copying).

import {h} from './dom.js';

const COLOURS = ['#1d4ed8', '#b45309', '#047857', '#7c3aed', '#be123c', '#0e7490', '#4d7c0f', '#a21caf'];

/** Seconds since the epoch for an RFC 3339 time. */
export function epoch(time) {
  return Date.parse(time) / 1000;
}

/**
 * A figure with a line plot. `x`: epoch seconds; `series`: [{label, values, dash?, colour?}] (values may hold
 * null for a gap); `band`: optional [upperIndex, lowerIndex] of series to shade between; `yLabel`;
 * `bars`: draw the first series as bars (daily amounts).
 */
export function plot({caption, x, series, band, yLabel, bars, summary}) {
  const target = h('div', {class: 'plot'});
  const figure = h('figure', {class: 'chart'}, h('figcaption', {}, caption), target,
    summary ? h('p', {class: 'muted summary'}, summary) : null);
  if (!window.uPlot) {
    target.append(h('p', {class: 'muted'}, 'The plotting library did not load (vendor/uPlot.iife.min.js).'));
    return figure;
  }
  if (x.length === 0) {
    target.append(h('p', {class: 'muted'}, 'No samples yet.'));
    return figure;
  }
  const options = {
    width: 720,
    height: 220,
    series: [
      {},
      ...series.map((item, i) => ({
        label: item.label,
        stroke: item.colour || COLOURS[i % COLOURS.length],
        width: 2,
        dash: item.dash,
        fill: bars && i === 0 ? 'rgba(29, 78, 216, 0.35)' : undefined,
        paths: bars && i === 0 ? window.uPlot.paths.bars({size: [0.6, 40]}) : undefined,
        points: {show: x.length < 60},
      })),
    ],
    axes: [{}, {label: yLabel, size: 70}],
    scales: {x: {time: true}},
    legend: {live: true},
  };
  if (band) options.bands = [{series: band, fill: 'rgba(180, 83, 9, 0.12)'}];
  const data = [x, ...series.map((item) => item.values)];
  // Drawn once the figure is in the page, at the width it was given there.
  setTimeout(() => {
    options.width = Math.max(320, Math.min(target.clientWidth || 720, 1100));
    new window.uPlot(options, data, target);
  }, 0);
  return figure;
}
