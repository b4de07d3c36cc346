// List-then-watch of a collection, the way client-go's reflector keeps a cache.
//
// A list gives the items and a resourceVersion; a watch from that version streams newline-delimited JSON
// events (ADDED, MODIFIED, DELETED, BOOKMARK, ERROR). When the stream ends (the server's timeout) the watch
// resumes from the last version seen; when that version left the server's retention window (410 Gone, as a
// status or as an ERROR event) or the connection fails, the collection is listed again and watched anew, after
// a growing pause on failure. Callers see a full replacement (`reset`) after every list and single events in
// between, so a view built from them matches the server's state at the last event. A 403 or 404 (the reader may not
// read the collection, or the project does not exist) ends the watch: asking again would get the same answer.

import {API, APIError, lines, ok, request, sleep} from './api.js';

/**
 * Keep a view of `path` (a collection under /apis/nodus.dev/v1, e.g. `namespaces/p/jobs`) up to date until
 * `signal` aborts. `query` holds labelSelector / fieldSelector. Callbacks: reset(items), event(type, object),
 * state(text, error) where text is 'live' or why it reconnects, and error is the APIError that ended the watch.
 */
export async function watchCollection(path, query, callbacks, signal) {
  const url = `${API}/${path}`;
  let pause = 1000;
  while (!signal.aborted) {
    try {
      const listQuery = new URLSearchParams(query);
      const list = await (await ok(await request('GET', `${url}?${listQuery}`, {signal}))).json();
      let version = list.metadata.resourceVersion;
      callbacks.reset(list.items || []);
      callbacks.state?.('live');
      pause = 1000;
      for (;;) {
        const watchQuery = new URLSearchParams({
          ...query, watch: '1', resourceVersion: version, allowWatchBookmarks: 'true',
        });
        const response = await request('GET', `${url}?${watchQuery}`, {signal});
        if (response.status === 410) break;
        await ok(response);
        let expired = false;
        for await (const line of lines(response.body)) {
          if (!line.trim()) continue;
          const event = JSON.parse(line);
          if (event.type === 'ERROR') {
            if (event.object?.code === 410) { expired = true; break; }
            throw new APIError(event.object?.code || 500, event.object);
          }
          version = event.object?.metadata?.resourceVersion || version;
          if (event.type !== 'BOOKMARK') callbacks.event(event.type, event.object);
        }
        if (expired || signal.aborted) break;
      }
    } catch (error) {
      if (signal.aborted) return;
      if (error instanceof APIError && (error.status === 403 || error.status === 404)) {
        callbacks.state?.(error.message, error);
        return;
      }
      callbacks.state?.(`reconnecting (${error.message})`);
      await sleep(pause, signal);
      pause = Math.min(pause * 2, 30000);
    }
  }
}

/**
 * A keyed map of objects kept by watchCollection: onChange(map) is called after every reset and event, at most
 * once per 50 ms (a burst of events redraws once).
 */
export function watchMap(path, query, onChange, signal, onState) {
  const items = new Map();
  let scheduled = false;
  const changed = () => {
    if (scheduled) return;
    scheduled = true;
    setTimeout(() => { scheduled = false; if (!signal.aborted) onChange(items); }, 50);
  };
  watchCollection(path, query, {
    reset(list) {
      items.clear();
      for (const item of list) items.set(item.metadata.name, item);
      changed();
    },
    event(type, object) {
      if (type === 'DELETED') items.delete(object.metadata.name);
      else items.set(object.metadata.name, object);
      changed();
    },
    state: onState,
  }, signal);
  return items;
}
