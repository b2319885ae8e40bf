"""A spider that yields what a careless or hostile spider could: odd item fields, hostile text."""

import scrapy

HUGE = 100 * 1024 * 1024


class HostileSpider(scrapy.Spider):
    name = "hostile"

    def __init__(self, start_url: str, **kwargs):
        super().__init__(**kwargs)
        self.start_url = start_url

    async def start(self):
        yield scrapy.Request(self.start_url, dont_filter=True)

    def parse(self, response):
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href)
        title = response.css("title::text").get(default="")
        if response.url.endswith("/odd-items.html"):
            yield from self.odd_items(response)
            return
        yield {"url": response.url, "title": title}

    def odd_items(self, response):
        base = response.url.rsplit("/", 1)[0]
        text = response.css("p::text").get(default="")
        yield {"url": 12345, "title": "a number as URL", "text": text + " number"}
        yield {"url": None, "title": "no URL"}
        yield {"url": (base + "/bytes-url").encode(), "text": text + " bytes url"}
        yield {"url": base + "/bytes-text", "text": text.encode() + b" bytes text"}
        yield {"url": base + "/none-text", "text": None}
        yield {"url": base + "/list-text", "text": ["not", "a", "string"]}
        yield {"url": 'javascript:alert(1)//"onload=alert(2)<script>\x1b[2J', "text": text + " javascript"}
        yield {"url": base + '/"onload=alert(3)<script>x</script>\x1b[31m', "text": text + " raw hostile url"}
        yield {"url": base + "/huge-text", "text": "Huge text, repeated. " * (HUGE // 21)}
        yield {"url": base + "/huge-html", "html": b"<html><body><p>" + b"Huge markup. " * (HUGE // 13) + b"</p>"}
        yield {"url": base + "/huge-title", "title": "t" * HUGE, "text": text + " huge title"}
