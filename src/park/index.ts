// Parked-queue operations: reading, grouping and replaying parked messages.
export {};
