"""A batch of writes commits in one statement: ``nodus_commit_batch(...)``, a server-side function (ADR 0056).

The group committer (``nodus.storage.committing``) used to send BEGIN, the lock of ``counters['rv']``, one
statement per write, the counter's bump with its NOTIFY and COMMIT: N + 4 round trips with the global
resourceVersion lock held across all of them. This function does the same work in one call, which the
committer sends on its own (an implicit transaction): the lock is held from the call to its commit.

The writes come as parallel arrays, one element per write, in batch order:

- ``p_operations``: ``create``, ``update`` or ``delete``;
- ``p_kinds``, ``p_namespaces``, ``p_names``: the key; ``p_uids``: the uid (creates only);
- ``p_labels`` (JSON object text), ``p_phases``, ``p_owner_uids`` (a JSON array of strings, one text per write:
  PostgreSQL arrays of arrays must be rectangular) and ``p_deleting``: the side columns (creates and updates);
- ``p_prefixes`` and ``p_suffixes``: the body as the API server encoded it, cut around its resourceVersion's
  value; the stored body is ``prefix || rv || suffix``, byte for byte what the API server would have encoded;
- ``p_expected_rvs``: the resourceVersion an update or delete expects (NULL: any).

The function locks the counter row, then takes each write in turn. A write whose precondition fails (a create
of an existing key, an update or delete of a missing one, an expected resourceVersion that is not the current
one) is not applied and takes no resourceVersion; every other write takes the next one, updates ``objects`` and
appends its ``events`` row (with the previous body, labels and phase for MODIFIED and DELETED). Last, the counter
is set to the last resourceVersion taken and ``pg_notify(p_channel, it)`` sent, as before even when no write was
applied. Any other error (a uid already used, a text PostgreSQL refuses) aborts the whole call.

It returns one row of two arrays, one element per write: ``outcomes`` (``applied``, ``exists``, ``missing``
or ``conflict``) and ``rvs`` (the resourceVersion an applied write took, the object's current one for a
conflict, else NULL).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-07
"""

from __future__ import annotations

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE FUNCTION nodus_commit_batch(
            p_operations text[], p_kinds text[], p_namespaces text[], p_names text[], p_uids text[],
            p_labels text[], p_phases text[], p_owner_uids text[], p_deleting boolean[],
            p_prefixes text[], p_suffixes text[], p_expected_rvs bigint[], p_channel text,
            OUT outcomes text[], OUT rvs bigint[]
        ) AS $$
        DECLARE
            w record;
            last_rv bigint;
            next_rv bigint;
            new_body text;
            old_rv bigint;
            old_body text;
            old_labels jsonb;
            old_phase text;
        BEGIN
            SELECT c.value INTO STRICT last_rv FROM counters c WHERE c.key = 'rv' FOR UPDATE;
            -- Filled to the batch's length first: assigning element n of an empty array would make n its lower bound.
            outcomes := array_fill(NULL::text, ARRAY[coalesce(cardinality(p_operations), 0)]);
            rvs := array_fill(NULL::bigint, ARRAY[coalesce(cardinality(p_operations), 0)]);
            FOR w IN
                SELECT * FROM unnest(p_operations, p_kinds, p_namespaces, p_names, p_uids, p_labels, p_phases,
                                     p_owner_uids, p_deleting, p_prefixes, p_suffixes, p_expected_rvs)
                    WITH ORDINALITY AS t(operation, kind, namespace, name, uid, labels, phase, owner_uids,
                                         deleting, prefix, suffix, expected_rv, n)
                ORDER BY t.n
            LOOP
                next_rv := last_rv + 1;
                new_body := w.prefix || next_rv::text || w.suffix;
                outcomes[w.n] := 'applied';
                IF w.operation = 'create' THEN
                    INSERT INTO objects AS o (kind, namespace, name, uid, rv, labels, phase, owner_uids, deleting,
                                              body)
                    VALUES (w.kind, w.namespace, w.name, w.uid, next_rv, w.labels::jsonb, w.phase,
                            ARRAY(SELECT u.uid FROM jsonb_array_elements_text(w.owner_uids::jsonb)
                                  WITH ORDINALITY AS u(uid, n) ORDER BY u.n),
                            w.deleting, new_body)
                    ON CONFLICT (kind, namespace, name) DO NOTHING;
                    IF NOT FOUND THEN
                        outcomes[w.n] := 'exists';
                        CONTINUE;
                    END IF;
                    INSERT INTO events (rv, kind, namespace, name, type, body, labels, phase)
                    VALUES (next_rv, w.kind, w.namespace, w.name, 'ADDED', new_body, w.labels::jsonb, w.phase);
                ELSIF w.operation IN ('update', 'delete') THEN
                    SELECT o.rv, o.body, o.labels, o.phase INTO old_rv, old_body, old_labels, old_phase
                    FROM objects o WHERE o.kind = w.kind AND o.namespace = w.namespace AND o.name = w.name;
                    IF NOT FOUND THEN
                        outcomes[w.n] := 'missing';
                        CONTINUE;
                    END IF;
                    IF w.operation = 'update' THEN
                        UPDATE objects o SET rv = next_rv, labels = w.labels::jsonb, phase = w.phase,
                            owner_uids = ARRAY(SELECT u.uid FROM jsonb_array_elements_text(w.owner_uids::jsonb)
                                               WITH ORDINALITY AS u(uid, n) ORDER BY u.n),
                            deleting = w.deleting, body = new_body
                        WHERE o.kind = w.kind AND o.namespace = w.namespace AND o.name = w.name
                          AND (w.expected_rv IS NULL OR o.rv = w.expected_rv);
                    ELSE
                        DELETE FROM objects o
                        WHERE o.kind = w.kind AND o.namespace = w.namespace AND o.name = w.name
                          AND (w.expected_rv IS NULL OR o.rv = w.expected_rv);
                    END IF;
                    IF NOT FOUND THEN
                        outcomes[w.n] := 'conflict';
                        rvs[w.n] := old_rv;
                        CONTINUE;
                    END IF;
                    IF w.operation = 'update' THEN
                        INSERT INTO events (rv, kind, namespace, name, type, body, labels, phase,
                                            prev_body, prev_labels, prev_phase)
                        VALUES (next_rv, w.kind, w.namespace, w.name, 'MODIFIED', new_body, w.labels::jsonb,
                                w.phase, old_body, old_labels, old_phase);
                    ELSE
                        INSERT INTO events (rv, kind, namespace, name, type, body, labels, phase,
                                            prev_body, prev_labels, prev_phase)
                        VALUES (next_rv, w.kind, w.namespace, w.name, 'DELETED', new_body, old_labels, old_phase,
                                old_body, old_labels, old_phase);
                    END IF;
                ELSE
                    RAISE EXCEPTION 'unknown operation %', w.operation USING ERRCODE = 'invalid_parameter_value';
                END IF;
                rvs[w.n] := next_rv;
                last_rv := next_rv;
            END LOOP;
            UPDATE counters SET value = last_rv WHERE key = 'rv';
            PERFORM pg_notify(p_channel, last_rv::text);
        END
        $$ LANGUAGE plpgsql
        """
    )


def downgrade() -> None:
    op.execute(
        "DROP FUNCTION nodus_commit_batch(text[], text[], text[], text[], text[], text[], text[], text[], boolean[], "
        "text[], text[], bigint[], text)"
    )
