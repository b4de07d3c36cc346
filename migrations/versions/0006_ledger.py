"""The ledger: accounts with their balances, balanced transactions of entries, holds and charges.

Money is NUMERIC(24, 6): decimal micro-dollars, never float (ADR 0046 §22).

* ``ledger_accounts(owner, name)``: ``owner`` is a project, or ``nodus`` for Nodus's own accounts;
  ``balance`` is the sum of the account's entries, kept in the same transaction as each entry.
* ``ledger_transactions``: one movement of money, named by its idempotency ``key`` (unique) and a
  ``fingerprint`` of its entries, so that replaying a key changes nothing and replaying it with other
  amounts is refused.
* ``ledger_entries``: the legs of a transaction. A deferred constraint trigger refuses any commit
  in which a transaction's entries do not sum to zero: the database itself keeps double entry.
* ``holds``: funds reserved for one allocation (an attempt's capacity), captured as it bills and
  released at the end; ``settled_at`` is set exactly once.
* ``charges``: what was charged, per allocation and segment, with the seconds and the frozen rate,
  for statements and for proving each amount (``covered`` marks time Nodus paid for).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

MONEY = sa.Numeric(24, 6)


def upgrade() -> None:
    op.create_table(
        "ledger_accounts",
        sa.Column("id", sa.BigInteger, sa.Identity(), nullable=False),
        sa.Column("owner", sa.Text, nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("balance", MONEY, nullable=False, server_default="0"),
        sa.PrimaryKeyConstraint("id", name="pk_ledger_accounts"),
        sa.UniqueConstraint("owner", "name", name="uq_ledger_accounts_owner_name"),
    )
    op.create_table(
        "ledger_transactions",
        sa.Column("id", sa.BigInteger, sa.Identity(), nullable=False),
        sa.Column("key", sa.Text, nullable=False),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("project", sa.Text, nullable=False),
        sa.Column("subject", sa.Text, nullable=False, server_default=""),
        sa.Column("fingerprint", sa.Text, nullable=False),
        sa.Column("memo", sa.Text, nullable=False, server_default=""),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.PrimaryKeyConstraint("id", name="pk_ledger_transactions"),
        sa.UniqueConstraint("key", name="uq_ledger_transactions_key"),
    )
    op.create_index("ix_ledger_transactions_project_created_at", "ledger_transactions", ["project", "created_at"])
    op.create_table(
        "ledger_entries",
        sa.Column("id", sa.BigInteger, sa.Identity(), nullable=False),
        sa.Column("transaction_id", sa.BigInteger, nullable=False),
        sa.Column("account_id", sa.BigInteger, nullable=False),
        sa.Column("amount", MONEY, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_ledger_entries"),
        sa.ForeignKeyConstraint(
            ["transaction_id"], ["ledger_transactions.id"], name="fk_ledger_entries_transaction_id_ledger_transactions"
        ),
        sa.ForeignKeyConstraint(["account_id"], ["ledger_accounts.id"], name="fk_ledger_entries_account_id_ledger_accounts"),
    )
    op.create_index("ix_ledger_entries_transaction_id", "ledger_entries", ["transaction_id"])
    op.create_index("ix_ledger_entries_account_id", "ledger_entries", ["account_id"])
    op.execute(
        """
        CREATE FUNCTION ledger_transaction_balances() RETURNS trigger AS $$
        BEGIN
            IF (SELECT coalesce(sum(amount), 0) FROM ledger_entries WHERE transaction_id = NEW.transaction_id) <> 0 THEN
                RAISE EXCEPTION 'ledger transaction % does not balance', NEW.transaction_id
                    USING ERRCODE = 'check_violation';
            END IF;
            RETURN NULL;
        END
        $$ LANGUAGE plpgsql
        """
    )
    op.execute(
        """
        CREATE CONSTRAINT TRIGGER ledger_entries_balance
        AFTER INSERT OR UPDATE OR DELETE ON ledger_entries
        DEFERRABLE INITIALLY DEFERRED
        FOR EACH ROW EXECUTE FUNCTION ledger_transaction_balances()
        """
    )
    op.create_table(
        "holds",
        sa.Column("id", sa.Text, nullable=False),
        sa.Column("project", sa.Text, nullable=False),
        sa.Column("subject", sa.Text, nullable=False),
        sa.Column("amount", MONEY, nullable=False),
        sa.Column("captured", MONEY, nullable=False, server_default="0"),
        sa.Column("released", MONEY, nullable=False, server_default="0"),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("settled_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_holds"),
        sa.CheckConstraint("amount >= 0 AND captured >= 0 AND released >= 0", name="ck_holds_non_negative"),
    )
    op.create_index("ix_holds_project", "holds", ["project"])
    op.create_table(
        "charges",
        sa.Column("id", sa.BigInteger, sa.Identity(), nullable=False),
        sa.Column("transaction_id", sa.BigInteger, nullable=False),
        sa.Column("project", sa.Text, nullable=False),
        sa.Column("subject", sa.Text, nullable=False),
        sa.Column("segment", sa.Text, nullable=False),
        sa.Column("seconds", sa.Numeric(18, 3), nullable=False),
        sa.Column("rate_per_hour", MONEY, nullable=False),
        sa.Column("amount", MONEY, nullable=False),
        sa.Column("covered", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.PrimaryKeyConstraint("id", name="pk_charges"),
        sa.ForeignKeyConstraint(
            ["transaction_id"], ["ledger_transactions.id"], name="fk_charges_transaction_id_ledger_transactions"
        ),
    )
    op.create_index("ix_charges_project_created_at", "charges", ["project", "created_at"])
    op.create_index("ix_charges_subject", "charges", ["subject"])


def downgrade() -> None:
    op.drop_table("charges")
    op.drop_table("holds")
    op.execute("DROP TRIGGER ledger_entries_balance ON ledger_entries")
    op.execute("DROP FUNCTION ledger_transaction_balances()")
    op.drop_table("ledger_entries")
    op.drop_table("ledger_transactions")
    op.drop_table("ledger_accounts")
