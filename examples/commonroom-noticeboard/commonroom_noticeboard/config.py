"""The plugin's section of `config.yaml`, `noticeboard:` (validated at start-up)."""

from __future__ import annotations

from dataclasses import dataclass

from daemon.plugin import check_range


@dataclass(frozen=True)
class NoticeboardConfig:
    #: The longest notice, in characters.
    max_length: int = 500
    #: Notices a member may post to one community per minute.
    posts_per_minute: int = 5
    #: Notices on a page of the board (and the API's default page).
    page_size: int = 20

    def __post_init__(self) -> None:
        check_range(self.max_length, "noticeboard.max_length", minimum=1, maximum=5000)
        check_range(self.posts_per_minute, "noticeboard.posts_per_minute", minimum=1, maximum=600)
        check_range(self.page_size, "noticeboard.page_size", minimum=1, maximum=100)
