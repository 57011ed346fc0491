-- Webhooks: what the receiver answered to a delivery's last attempt (its first 2 KB,
-- as text), shown on the developer's delivery page next to the payload that was sent.
ALTER TABLE webhook_deliveries ADD COLUMN response_body TEXT;
