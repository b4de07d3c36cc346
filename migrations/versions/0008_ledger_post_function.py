"""The ledger posts in one statement: ``ledger_post(...)``, a server-side function (benchmarks §6).

A posting used to be about ten round trips between the API server and PostgreSQL, and the project's
``held`` and Nodus's ``revenue`` rows stayed locked across most of them, while the client's event loop
came round to send the next one. ``ledger_post`` makes the same posting in one call, in an order that
takes the hot account rows last, so that they are locked only for the end of the call and the commit:

1. the idempotency key: the transaction row is inserted ``ON CONFLICT (key) DO NOTHING``; when the key
   exists, the same fingerprint is a replay (``replayed``; nothing else happens) and another is refused
   (``unique_violation``, constraint ``ledger_key_reused``). With ``p_replay`` false (the caller looked
   the key up already, in its own transaction) a plain insert: a concurrent posting of the same key is a
   ``unique_violation`` on ``uq_ledger_transactions_key``;
2. with ``p_hold``: the hold's ``amount``, ``captured`` and ``released`` move by the given amounts while it
   is unsettled and its amount stays at or above zero (else ``check_violation``, constraint
   ``ledger_hold_settled``). A hold change that does more (create, settle, a cap, budgets) is made by the
   caller, in the same transaction, before the call (``nodus.storage.ledger._change_hold``);
3. missing accounts are created (only then: ``ON CONFLICT`` on an existing row would wait for whoever is
   updating it) and the charge row inserted;
4. the accounts are locked ``FOR NO KEY UPDATE`` in id order (two postings never wait on each other in a
   cycle); a guarded account that would go below zero refuses the posting (``check_violation``,
   constraint ``ledger_overdrawn``, the amounts in the detail as JSON); the balances move;
5. the entries are inserted, after the locks: their foreign key takes ``KEY SHARE`` on the accounts,
   which, taken on rows another posting holds, would make a MultiXact of all their lockers each time.

The deferred trigger of 0006 still refuses a commit whose entries do not balance.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-29
"""

from __future__ import annotations

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE FUNCTION ledger_post(
            p_key text, p_kind text, p_project text, p_subject text, p_fingerprint text, p_memo text,
            p_owners text[], p_names text[], p_amounts numeric[], p_guarded boolean[],
            p_hold text, p_held numeric, p_captured numeric, p_released numeric,
            p_segment text, p_seconds numeric, p_rate numeric, p_amount numeric, p_covered boolean,
            p_replay boolean,
            OUT transaction_id bigint, OUT replayed boolean
        ) AS $$
        DECLARE
            account record;
            known text;
        BEGIN
            replayed := false;
            IF p_replay THEN
                INSERT INTO ledger_transactions AS t (key, kind, project, subject, fingerprint, memo)
                VALUES (p_key, p_kind, p_project, p_subject, p_fingerprint, p_memo)
                ON CONFLICT (key) DO NOTHING RETURNING t.id INTO transaction_id;
                IF transaction_id IS NULL THEN
                    SELECT t.id, t.fingerprint INTO transaction_id, known FROM ledger_transactions t
                    WHERE t.key = p_key;
                    IF known <> p_fingerprint THEN
                        RAISE EXCEPTION 'the idempotency key % was used before for a posting with other amounts', p_key
                            USING ERRCODE = 'unique_violation', CONSTRAINT = 'ledger_key_reused';
                    END IF;
                    replayed := true;
                    RETURN;
                END IF;
            ELSE
                INSERT INTO ledger_transactions AS t (key, kind, project, subject, fingerprint, memo)
                VALUES (p_key, p_kind, p_project, p_subject, p_fingerprint, p_memo) RETURNING t.id INTO transaction_id;
            END IF;
            IF p_hold IS NOT NULL THEN
                UPDATE holds h SET amount = h.amount + p_held, captured = h.captured + p_captured,
                    released = h.released + p_released
                WHERE h.id = p_hold AND h.settled_at IS NULL AND h.amount + p_held >= 0;
                IF NOT FOUND THEN
                    RAISE EXCEPTION 'hold % is settled already, does not exist, or holds less than asked', p_hold
                        USING ERRCODE = 'check_violation', CONSTRAINT = 'ledger_hold_settled';
                END IF;
            END IF;
            IF EXISTS (SELECT FROM unnest(p_owners, p_names) AS e(owner, name) WHERE NOT EXISTS
                       (SELECT FROM ledger_accounts a WHERE a.owner = e.owner AND a.name = e.name)) THEN
                INSERT INTO ledger_accounts (owner, name)
                SELECT DISTINCT e.owner, e.name FROM unnest(p_owners, p_names) AS e(owner, name)
                ON CONFLICT (owner, name) DO NOTHING;
            END IF;
            IF p_segment IS NOT NULL THEN
                INSERT INTO charges (transaction_id, project, subject, segment, seconds, rate_per_hour, amount, covered)
                VALUES (ledger_post.transaction_id, p_project, p_subject, p_segment, p_seconds, p_rate, p_amount,
                        p_covered);
            END IF;
            -- The hot rows last (steps 4 and 5 of the docstring): locked from here to the commit.
            FOR account IN
                SELECT a.id, a.owner, a.name, a.balance, c.change, c.guarded
                FROM ledger_accounts a
                JOIN (SELECT e.owner, e.name, sum(e.amount) AS change, bool_or(e.guarded) AS guarded
                      FROM unnest(p_owners, p_names, p_amounts, p_guarded) AS e(owner, name, amount, guarded)
                      GROUP BY e.owner, e.name) c ON a.owner = c.owner AND a.name = c.name
                ORDER BY a.id
                FOR NO KEY UPDATE OF a
            LOOP
                IF account.guarded AND account.balance + account.change < 0 THEN
                    RAISE EXCEPTION 'account %/% holds %; moving % would take it below zero',
                        account.owner, account.name, account.balance, account.change
                        USING ERRCODE = 'check_violation', CONSTRAINT = 'ledger_overdrawn',
                              DETAIL = json_build_object('owner', account.owner, 'account', account.name,
                                                         'balance', account.balance::text,
                                                         'change', account.change::text)::text;
                END IF;
                IF account.change <> 0 THEN
                    UPDATE ledger_accounts SET balance = balance + account.change WHERE id = account.id;
                END IF;
            END LOOP;
            INSERT INTO ledger_entries (transaction_id, account_id, amount)
            SELECT ledger_post.transaction_id, a.id, e.amount
            FROM unnest(p_owners, p_names, p_amounts) WITH ORDINALITY AS e(owner, name, amount, n)
            JOIN ledger_accounts a ON a.owner = e.owner AND a.name = e.name
            ORDER BY e.n;
        END
        $$ LANGUAGE plpgsql
        """
    )


def downgrade() -> None:
    op.execute(
        "DROP FUNCTION ledger_post(text, text, text, text, text, text, text[], text[], numeric[], boolean[], "
        "text, numeric, numeric, numeric, text, numeric, numeric, numeric, boolean, boolean)"
    )
