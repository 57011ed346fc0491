-- Webhooks: how many deliveries to one webhook may be in flight at once. 1 (the default)
-- sends in strict event order; more sends faster to receivers that do not need the order.
ALTER TABLE webhooks ADD COLUMN concurrency INTEGER NOT NULL DEFAULT 1
    CHECK (concurrency BETWEEN 1 AND 32);
